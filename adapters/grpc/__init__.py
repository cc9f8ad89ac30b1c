"""The 5.x gRPC protocol (apache.rocketmq.v2): a client on the stubs Apache publishes, and suite targets."""
