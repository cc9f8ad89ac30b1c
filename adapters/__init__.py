"""rmqspec.adapters: targets of the conformance suite (in-process model, remoting protocol)."""
