"""Stored records, in-flight messages, consume-queue entries and message ids (facts §1.3, §2, §8)."""

from __future__ import annotations

import attrs
import immutables

from .constants import Prop, transaction_value
from .properties import encode_properties

Props = immutables.Map[str, str]
Host = tuple[str, int]
QueueKey = tuple[str, int]
# A consume-queue entry: (commit-log offset, size, tags code), 20 bytes on disk. rule: dispatch/in-order
CQEntry = tuple[int, int, int]

EMPTY_PROPS: Props = immutables.Map()
RECORD_FIXED_SIZE = 91  # IPv4 born and store hosts; facts §8


def props(mapping: dict[str, str] | None = None, /, **kw: str) -> Props:
    return immutables.Map({**(mapping or {}), **kw})


def stored_size(body: bytes, topic: str, properties: Props) -> int:
    """Size of a stored record with IPv4 hosts: 91 bytes plus body, topic and properties (facts §8)."""
    return RECORD_FIXED_SIZE + len(body) + len(topic.encode()) + len(encode_properties(properties).encode())


def offset_msg_id(host: Host, commit_log_offset: int) -> str:
    """The offset message id: store IP (4 bytes), port (int32), commit-log offset (int64), upper-case hex.

    rule: put/send-result
    """
    ip, port = host
    octets = bytes(int(x) for x in ip.split("."))
    return (octets + port.to_bytes(4, "big") + commit_log_offset.to_bytes(8, "big")).hex().upper()


@attrs.frozen
class Record:
    """One record of the commit log, as a consumer decodes it (properties = the stored string, decoded)."""

    commit_log_offset: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    sys_flag: int
    flag: int
    body: bytes
    properties: Props
    born_timestamp: int
    store_timestamp: int
    born_host: Host
    store_host: Host
    reconsume_times: int
    prepared_transaction_offset: int

    @property
    def msg_id(self) -> str:
        return offset_msg_id(self.store_host, self.commit_log_offset)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(Prop.UNIQ_KEY)

    @property
    def tran_type(self) -> int:
        return transaction_value(self.sys_flag)


@attrs.frozen
class Inner:
    """A message on its way into the store (RocketMQ's MessageExtBrokerInner).

    ``properties`` is the in-memory map the broker decides on; ``stored`` is the properties string
    built earlier (as a map), or None when the string is built from ``properties`` at append time.
    The two differ on purpose in RocketMQ (for example a delivered delayed copy stores DELAY in its
    string but not in its map), and the model keeps that difference visible.
    """

    topic: str
    queue_id: int
    body: bytes
    properties: Props
    stored: Props | None = None
    sys_flag: int = 0
    flag: int = 0
    born_timestamp: int = 0
    born_host: Host = ("127.0.0.1", 0)
    store_host: Host = ("127.0.0.1", 10911)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    # The length in bytes of the stored properties string when it is not the broker's encoding of
    # ``stored_properties()`` (None): a batch message stores the strings its client sent, joined to the
    # wrapper's, so a key both carry (WAIT) is written twice.
    props_bytes: int | None = None

    def stored_properties(self) -> Props:
        return self.properties if self.stored is None else self.stored
