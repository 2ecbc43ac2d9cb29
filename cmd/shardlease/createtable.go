package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/shardlease/shardlease"
)

var createTableCommand = &command{
	name:    "create-table",
	summary: "create the lease table (does nothing if it exists)",
	usage: `
Usage: shardlease create-table -table TABLE [-json] [-region REGION] [-dynamodb-endpoint URL]

Creates the lease table TABLE: one string partition key, lease_key, and
on-demand billing. It waits until the table is active. If the table exists
already with that key schema nothing is changed; if it exists with another,
the command fails. One table serves every stream of a service.

Example:

	shardlease create-table -table orders-leases -region eu-west-1
`,
	flags: func(fs *flag.FlagSet, st *cli) func(context.Context) error {
		table := fs.String("table", "", "name of the lease `table` to create (required)")
		asJSON := fs.Bool("json", false, `print the result as JSON: {"table": ..., "action": "created" or "exists"}`)
		return func(ctx context.Context) error {
			if err := requireFlags("table", *table); err != nil {
				return err
			}
			if err := shardlease.ValidateTableName(*table); err != nil {
				return usagef("-table: %v", err)
			}
			client, err := st.dynamo(ctx)
			if err != nil {
				return err
			}
			store, err := shardlease.NewDynamoStore(client, *table)
			if err != nil {
				return err
			}
			action := "exists"
			switch err := store.CheckTable(ctx); {
			case errors.Is(err, shardlease.ErrTableNotFound):
				if err := shardlease.CreateTable(ctx, client, *table); err != nil {
					return err
				}
				action = "created"
			case err != nil:
				return err
			}
			if *asJSON {
				return st.printJSON(struct {
					Table  string `json:"table"`
					Action string `json:"action"`
				}{*table, action})
			}
			if action == "created" {
				fmt.Fprintf(st.stdout, "created lease table %s\n", *table)
			} else {
				fmt.Fprintf(st.stdout, "lease table %s exists already with the right key schema; nothing changed\n", *table)
			}
			return nil
		}
	},
}
