from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tensor(_message.Message):
    __slots__ = ("dtype", "shape", "data")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class TensorSpec(_message.Message):
    __slots__ = ("name", "dtype", "shape", "minimum", "maximum", "num_values")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    MINIMUM_FIELD_NUMBER: _ClassVar[int]
    MAXIMUM_FIELD_NUMBER: _ClassVar[int]
    NUM_VALUES_FIELD_NUMBER: _ClassVar[int]
    name: str
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    minimum: Tensor
    maximum: Tensor
    num_values: int
    def __init__(self, name: _Optional[str] = ..., dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., minimum: _Optional[_Union[Tensor, _Mapping]] = ..., maximum: _Optional[_Union[Tensor, _Mapping]] = ..., num_values: _Optional[int] = ...) -> None: ...

class HelloRequest(_message.Message):
    __slots__ = ("protocol_version", "actor_id", "num_envs", "observation_spec", "action_spec")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_ENVS_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_SPEC_FIELD_NUMBER: _ClassVar[int]
    ACTION_SPEC_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    actor_id: int
    num_envs: int
    observation_spec: TensorSpec
    action_spec: TensorSpec
    def __init__(self, protocol_version: _Optional[int] = ..., actor_id: _Optional[int] = ..., num_envs: _Optional[int] = ..., observation_spec: _Optional[_Union[TensorSpec, _Mapping]] = ..., action_spec: _Optional[_Union[TensorSpec, _Mapping]] = ...) -> None: ...

class HelloResponse(_message.Message):
    __slots__ = ("protocol_version", "observation_spec", "action_spec", "first_env_id", "num_envs", "num_envs_total", "session_id")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_SPEC_FIELD_NUMBER: _ClassVar[int]
    ACTION_SPEC_FIELD_NUMBER: _ClassVar[int]
    FIRST_ENV_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_ENVS_FIELD_NUMBER: _ClassVar[int]
    NUM_ENVS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    observation_spec: TensorSpec
    action_spec: TensorSpec
    first_env_id: int
    num_envs: int
    num_envs_total: int
    session_id: str
    def __init__(self, protocol_version: _Optional[int] = ..., observation_spec: _Optional[_Union[TensorSpec, _Mapping]] = ..., action_spec: _Optional[_Union[TensorSpec, _Mapping]] = ..., first_env_id: _Optional[int] = ..., num_envs: _Optional[int] = ..., num_envs_total: _Optional[int] = ..., session_id: _Optional[str] = ...) -> None: ...

class StepRequest(_message.Message):
    __slots__ = ("env_ids", "run_ids", "reward", "terminated", "truncated", "observation", "final_observation", "episode_return", "episode_length", "sequence", "life_lost")
    ENV_IDS_FIELD_NUMBER: _ClassVar[int]
    RUN_IDS_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    TERMINATED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    FINAL_OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    EPISODE_RETURN_FIELD_NUMBER: _ClassVar[int]
    EPISODE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LIFE_LOST_FIELD_NUMBER: _ClassVar[int]
    env_ids: Tensor
    run_ids: Tensor
    reward: Tensor
    terminated: Tensor
    truncated: Tensor
    observation: Tensor
    final_observation: Tensor
    episode_return: Tensor
    episode_length: Tensor
    sequence: int
    life_lost: Tensor
    def __init__(self, env_ids: _Optional[_Union[Tensor, _Mapping]] = ..., run_ids: _Optional[_Union[Tensor, _Mapping]] = ..., reward: _Optional[_Union[Tensor, _Mapping]] = ..., terminated: _Optional[_Union[Tensor, _Mapping]] = ..., truncated: _Optional[_Union[Tensor, _Mapping]] = ..., observation: _Optional[_Union[Tensor, _Mapping]] = ..., final_observation: _Optional[_Union[Tensor, _Mapping]] = ..., episode_return: _Optional[_Union[Tensor, _Mapping]] = ..., episode_length: _Optional[_Union[Tensor, _Mapping]] = ..., sequence: _Optional[int] = ..., life_lost: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class StepResponse(_message.Message):
    __slots__ = ("action",)
    ACTION_FIELD_NUMBER: _ClassVar[int]
    action: Tensor
    def __init__(self, action: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
