"""The one errno translator."""

from __future__ import annotations

import errno

import pytest

from parlschedd.host.errors import (
    AccessDenied,
    HostError,
    InvalidMask,
    ThreadGone,
    TooManyFiles,
    Unsupported,
    translated,
)


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (errno.ESRCH, ThreadGone),
        (errno.ENOENT, ThreadGone),
        (errno.EPERM, AccessDenied),
        (errno.EACCES, AccessDenied),
        (errno.ENOSYS, Unsupported),
        (errno.EOPNOTSUPP, Unsupported),
        (errno.EMFILE, TooManyFiles),
        (errno.ENFILE, TooManyFiles),
        (errno.EIO, HostError),
    ],
)
def test_default_table(code: int, kind: type[HostError]) -> None:
    with pytest.raises(kind) as info, translated("op", tid=42):
        raise OSError(code, "boom")
    assert type(info.value) is kind
    assert info.value.tid == 42 and info.value.pid is None
    assert info.value.errno == code
    assert "op (tid 42)" in str(info.value) and errno.errorcode[code] in str(info.value)
    assert isinstance(info.value.__cause__, OSError)


def test_overrides_change_one_meaning_only() -> None:
    with pytest.raises(InvalidMask), translated("set", pid=7, overrides={errno.EINVAL: InvalidMask}):
        raise OSError(errno.EINVAL, "bad")
    with pytest.raises(Unsupported), translated("open", overrides={errno.ENOENT: Unsupported}):
        raise FileNotFoundError(errno.ENOENT, "no event")
    with pytest.raises(ThreadGone), translated("open", overrides={errno.ENOENT: Unsupported}):
        raise ProcessLookupError(errno.ESRCH, "gone")


def test_non_oserror_passes_through() -> None:
    with pytest.raises(ValueError), translated("parse"):
        raise ValueError("not an OS error")
