from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ServerInfo(_message.Message):
    __slots__ = ("keep_versions", "max_message_bytes", "waiting_calls", "fetch_streams", "bulk_connections", "refused_busy", "refused_bulk", "refused_credentials")
    KEEP_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    WAITING_CALLS_FIELD_NUMBER: _ClassVar[int]
    FETCH_STREAMS_FIELD_NUMBER: _ClassVar[int]
    BULK_CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    REFUSED_BUSY_FIELD_NUMBER: _ClassVar[int]
    REFUSED_BULK_FIELD_NUMBER: _ClassVar[int]
    REFUSED_CREDENTIALS_FIELD_NUMBER: _ClassVar[int]
    keep_versions: int
    max_message_bytes: int
    waiting_calls: int
    fetch_streams: int
    bulk_connections: int
    refused_busy: int
    refused_bulk: int
    refused_credentials: int
    def __init__(self, keep_versions: _Optional[int] = ..., max_message_bytes: _Optional[int] = ..., waiting_calls: _Optional[int] = ..., fetch_streams: _Optional[int] = ..., bulk_connections: _Optional[int] = ..., refused_busy: _Optional[int] = ..., refused_bulk: _Optional[int] = ..., refused_credentials: _Optional[int] = ...) -> None: ...

class Manifest(_message.Message):
    __slots__ = ("policy_json",)
    POLICY_JSON_FIELD_NUMBER: _ClassVar[int]
    policy_json: bytes
    def __init__(self, policy_json: _Optional[bytes] = ...) -> None: ...

class PublishFrame(_message.Message):
    __slots__ = ("manifest", "chunk")
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    manifest: Manifest
    chunk: TensorChunk
    def __init__(self, manifest: _Optional[_Union[Manifest, _Mapping]] = ..., chunk: _Optional[_Union[TensorChunk, _Mapping]] = ...) -> None: ...

class TensorChunk(_message.Message):
    __slots__ = ("tensor", "offset", "data")
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    tensor: int
    offset: int
    data: bytes
    def __init__(self, tensor: _Optional[int] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class VersionRequest(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class VersionList(_message.Message):
    __slots__ = ("versions",)
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, versions: _Optional[_Iterable[int]] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("version", "names")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    version: int
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, version: _Optional[int] = ..., names: _Optional[_Iterable[str]] = ...) -> None: ...

class BulkTicket(_message.Message):
    __slots__ = ("ticket", "port")
    TICKET_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    ticket: bytes
    port: int
    def __init__(self, ticket: _Optional[bytes] = ..., port: _Optional[int] = ...) -> None: ...

class OpenQueueRequest(_message.Message):
    __slots__ = ("queue", "max_deliveries")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    queue: str
    max_deliveries: int
    def __init__(self, queue: _Optional[str] = ..., max_deliveries: _Optional[int] = ...) -> None: ...

class QueueRef(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: str
    def __init__(self, queue: _Optional[str] = ...) -> None: ...

class PutRequest(_message.Message):
    __slots__ = ("queue", "item_id", "payload")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    queue: str
    item_id: str
    payload: bytes
    def __init__(self, queue: _Optional[str] = ..., item_id: _Optional[str] = ..., payload: _Optional[bytes] = ...) -> None: ...

class PutReply(_message.Message):
    __slots__ = ("added",)
    ADDED_FIELD_NUMBER: _ClassVar[int]
    added: bool
    def __init__(self, added: _Optional[bool] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("queue", "lease_s", "timeout_s")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    LEASE_S_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    queue: str
    lease_s: float
    timeout_s: float
    def __init__(self, queue: _Optional[str] = ..., lease_s: _Optional[float] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class LeaseReply(_message.Message):
    __slots__ = ("found", "item_id", "payload", "token", "delivery", "expires_at")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    found: bool
    item_id: str
    payload: bytes
    token: str
    delivery: int
    expires_at: float
    def __init__(self, found: _Optional[bool] = ..., item_id: _Optional[str] = ..., payload: _Optional[bytes] = ..., token: _Optional[str] = ..., delivery: _Optional[int] = ..., expires_at: _Optional[float] = ...) -> None: ...

class LeaseRef(_message.Message):
    __slots__ = ("queue", "item_id", "token")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    queue: str
    item_id: str
    token: str
    def __init__(self, queue: _Optional[str] = ..., item_id: _Optional[str] = ..., token: _Optional[str] = ...) -> None: ...

class ExtendRequest(_message.Message):
    __slots__ = ("lease", "lease_s")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    LEASE_S_FIELD_NUMBER: _ClassVar[int]
    lease: LeaseRef
    lease_s: float
    def __init__(self, lease: _Optional[_Union[LeaseRef, _Mapping]] = ..., lease_s: _Optional[float] = ...) -> None: ...

class StatsReply(_message.Message):
    __slots__ = ("ready", "leased", "dead")
    READY_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    DEAD_FIELD_NUMBER: _ClassVar[int]
    ready: int
    leased: int
    dead: int
    def __init__(self, ready: _Optional[int] = ..., leased: _Optional[int] = ..., dead: _Optional[int] = ...) -> None: ...
