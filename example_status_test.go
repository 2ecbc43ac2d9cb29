package shardlease_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// A status endpoint beside the service's own: GET /status answers with what
// the consumer holds, how far behind each shard is, and its role.
func ExampleConsumer_StatusHandler() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := shardleasetest.NewKinesis() // in a service: kinesis.NewFromConfig(cfg)
	_, _ = stream.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(2)})
	consumer, err := shardlease.NewConsumer(stream, shardlease.NewMemoryStore(), "orders",
		func(context.Context, *shardlease.Batch) error { return nil },
		shardlease.WithOwnerID("worker-1"), shardlease.WithIdlePollInterval(10*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan error, 1)
	go func() { done <- consumer.Run(ctx) }()
	defer func() { cancel(); <-done }()

	mux := http.NewServeMux()
	mux.Handle("/status", consumer.StatusHandler()) // in a service: http.ListenAndServe(":8080", mux)
	server := httptest.NewServer(mux)
	defer server.Close()

	ready := func(s shardlease.Status) bool {
		return s.Coordinating && len(s.Shards) == 2 && s.Shards[0].Read && s.Shards[1].Read
	}
	for !ready(consumer.Status()) {
		time.Sleep(10 * time.Millisecond) // until it holds and has read both shards, and coordinates
	}
	resp, err := http.Get(server.URL + "/status")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	var status struct {
		Role   string `json:"role"`
		Shards []struct {
			Shard         string `json:"shard"`
			BehindLatest  int64  `json:"behind_latest_ms"`
			CheckpointAge int64  `json:"checkpoint_age_ms"`
		} `json:"shards"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&status); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("role:", status.Role)
	for _, s := range status.Shards {
		fmt.Printf("%s behind %d ms, checkpoint age %d ms\n", s.Shard, s.BehindLatest, s.CheckpointAge)
	}
	// Output:
	// role: coordinator
	// shardId-000000000000 behind 0 ms, checkpoint age 0 ms
	// shardId-000000000001 behind 0 ms, checkpoint age 0 ms
}
