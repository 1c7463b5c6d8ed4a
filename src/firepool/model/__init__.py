"""Value types shared by every layer: job and pod states, pool specs, typed errors.

Everything here is plain data. The control plane (`control/`, `scheduling/`), the adapters
(`store/`, `backends/`), the drivers (`service/`, `sim/`) and the faces (`api/`, `client/`,
`cli/`) all speak these types, so a rule written once holds everywhere: an invalid pool spec
is refused the same way whether it comes from a catalog file, the API or a simulator sweep.

Each submodule has one job (job states, request errors, pods, pools, job specs, ...); this
package re-exports every public name so that `from firepool.model import X` keeps working.
Submodules import each other directly, never through this package.
"""

from firepool.model.auth import (
    Principal,
    TokenRole,
)
from firepool.model.base import (
    StrictModel,
)
from firepool.model.env import (
    forbidden_env_reason,
)
from firepool.model.errors import (
    BadPackageError,
    ConfigError,
    ConflictError,
    ErrorCode,
    FirepoolError,
    ForbiddenEnvError,
    ForbiddenError,
    ImageNotAllowedError,
    InvalidTransitionError,
    LostRaceError,
    NotFoundError,
    PayloadTooLargeError,
    QuotaExceededError,
    RequestValidationError,
    StoreUnavailableError,
    UnauthorizedError,
    UnavailableError,
    UnknownPoolError,
)
from firepool.model.images import (
    image_is_pinned,
    image_reference_problem,
    image_repository,
)
from firepool.model.job import (
    ELASTIC_APPS,
    ElasticSpec,
    JobKind,
    JobSpec,
    Topology,
    attempt_id,
    parse_attempt_id,
)
from firepool.model.job_errors import (
    JobErrorClass,
    parse_job_error_class,
)
from firepool.model.pods import (
    AcquisitionPath,
    AcquisitionReason,
    PodInfo,
    PodRole,
    PodState,
    PoolStats,
    RoundAllocation,
    TimelinePoint,
)
from firepool.model.pool import (
    ACCELERATORS,
    CPU_RESOURCE,
    LeaseTagMode,
    NetworkAccess,
    PoolSpec,
)
from firepool.model.states import (
    JOB_TRANSITIONS,
    JobState,
)

__all__ = [
    "ACCELERATORS",
    "CPU_RESOURCE",
    "ELASTIC_APPS",
    "JOB_TRANSITIONS",
    "AcquisitionPath",
    "AcquisitionReason",
    "BadPackageError",
    "ConfigError",
    "ConflictError",
    "ElasticSpec",
    "ErrorCode",
    "FirepoolError",
    "ForbiddenEnvError",
    "ForbiddenError",
    "ImageNotAllowedError",
    "InvalidTransitionError",
    "JobErrorClass",
    "JobKind",
    "JobSpec",
    "JobState",
    "LeaseTagMode",
    "LostRaceError",
    "NetworkAccess",
    "NotFoundError",
    "PayloadTooLargeError",
    "PodInfo",
    "PodRole",
    "PodState",
    "PoolSpec",
    "PoolStats",
    "Principal",
    "QuotaExceededError",
    "RequestValidationError",
    "RoundAllocation",
    "StoreUnavailableError",
    "StrictModel",
    "TimelinePoint",
    "TokenRole",
    "Topology",
    "UnauthorizedError",
    "UnavailableError",
    "UnknownPoolError",
    "attempt_id",
    "forbidden_env_reason",
    "image_is_pinned",
    "image_reference_problem",
    "image_repository",
    "parse_attempt_id",
    "parse_job_error_class",
]
