"""rmqspec.conformance: the conformance suite, history checker and trace verification. Imports the reference."""
