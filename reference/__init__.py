"""rmqspec.reference: the pure-functional reference model of RocketMQ broker semantics.

Nothing here performs I/O, reads a clock or draws a random number: time is the ``now`` argument of
every transition, and where a real broker chooses at random the choice is an argument too.
Rule IDs (``area/case``) cited in comments and values link this code to ``spec/``.
"""
