"""Errors genrun reports to the user; each maps to a CLI exit code (its `exit_code`)."""


class GenrunError(Exception):
    """Base of every error genrun reports with a message instead of a traceback."""

    exit_code = 1


class RequestError(GenrunError):
    """The request is refused (bad file, unknown key, wrong type); nothing is written."""

    exit_code = 2


class UsageError(GenrunError):
    """A command-line option (or `$GENRUN_STORE`) has a value genrun refuses before reading any snapshot; exit 2 like
    argparse's own usage errors."""

    exit_code = 2


class BudgetRefused(GenrunError):
    """The pre-flight estimate does not fit the context or the device memory."""

    exit_code = 3


class StoreError(GenrunError):
    """The snapshot store cannot be written (read-only, full, missing)."""

    exit_code = 1


class BackendContractError(GenrunError):
    """A backend reported what genrun's own records contradict (a count beyond what its recorder counted)."""

    exit_code = 1


class ForkedChildReturned(GenrunError):
    """A process forked by user code returned into genrun during the run; it was stopped before it wrote anything."""

    exit_code = 1


class SnapshotError(GenrunError):
    """A snapshot is missing, incomplete, or not in the state the command needs."""

    exit_code = 1


class FrozenMismatch(GenrunError):
    """A planned snapshot no longer matches what was frozen (plan digest, code hash)."""

    exit_code = 1


class ApprovalRequired(GenrunError):
    """`--require-approval` (or `[policy]`) and no valid `approve` record for the plan digest."""

    exit_code = 1


class SignoffError(GenrunError):
    """A sign-off cannot be made (bad decision, unsealed snapshot, missing key, no ssh-keygen)."""

    exit_code = 2
