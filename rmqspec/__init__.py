"""rmqspec: the executable specification of Apache RocketMQ broker-side message semantics.

Subpackages: ``rmqspec.reference`` (the pure model, from ``reference/``), ``rmqspec.conformance`` (suite,
checker, traces; from ``conformance/``) and ``rmqspec.adapters`` (targets; from ``adapters/``).
"""

__version__ = "0.1.0"
