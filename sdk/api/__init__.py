"""Generated gRPC and protobuf code: never edit by hand (`make proto`)."""
