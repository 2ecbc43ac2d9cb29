package main

import "context"

func measureFailover(ctx context.Context, e *env) error { return nil }
func measureBalance(ctx context.Context, e *env) error  { return nil }
func measureScale(ctx context.Context, e *env) error    { return nil }
