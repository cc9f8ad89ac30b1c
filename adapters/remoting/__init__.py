"""RocketMQ 4.x remoting protocol (facts §8, §10, §11): the pure ``codec`` and the asyncio ``client``."""

from .client import ConnectionLost, RemotingClient, RemotingError, RemotingTimeout
from .codec import (
    FrameDecoder,
    ProtocolError,
    RemotingCommand,
    RequestCode,
    WireRecord,
    decode_frame,
    decode_records,
    encode_frame,
    encode_record,
)

__all__ = [
    "ConnectionLost",
    "FrameDecoder",
    "ProtocolError",
    "RemotingClient",
    "RemotingCommand",
    "RemotingError",
    "RemotingTimeout",
    "RequestCode",
    "WireRecord",
    "decode_frame",
    "decode_records",
    "encode_frame",
    "encode_record",
]
