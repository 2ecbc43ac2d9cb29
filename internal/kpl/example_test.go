package kpl_test

import (
	"fmt"

	"github.com/shardlease/shardlease/internal/kpl"
)

func ExampleDeaggregate() {
	data := kpl.Aggregate([]kpl.UserRecord{
		{PartitionKey: "user-1", Data: []byte("signed up")},
		{PartitionKey: "user-2", ExplicitHashKey: "42", Data: []byte("logged in")},
	})
	if !kpl.IsAggregated(data) {
		return // an ordinary record
	}
	records, err := kpl.Deaggregate(data)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range records {
		fmt.Printf("%d %s %q %s\n", r.SubSequence, r.PartitionKey, r.ExplicitHashKey, r.Data)
	}
	// Output:
	// 0 user-1 "" signed up
	// 1 user-2 "42" logged in
}
