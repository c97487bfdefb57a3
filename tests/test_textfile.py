"""parlschedd/textfile.py: the one reading of the files a user names, on real files, a
real FIFO and a real device."""

import os
import stat
import subprocess
import sys

import pytest

from parlschedd.textfile import NotARegularFile, NotUtf8, TooLarge, decode, read


def test_text_is_decoded_and_a_bom_dropped_only_when_asked():
    assert decode("période\n".encode()) == "période\n"
    assert decode(b"\xef\xbb\xbfnsp\n", bom=True) == "nsp\n" and decode(b"\xef\xbb\xbfnsp\n") == "\ufeffnsp\n"


def test_the_first_byte_that_is_not_utf8_is_named_with_its_line():
    """A file saved as Latin-1: its é (0xe9) on line 3, found by line, not offset."""
    with pytest.raises(NotUtf8) as e:
        decode("a: 1\nb: 2\n# caf".encode() + b"\xe9\n# \xff\n")
    assert (e.value.line, e.value.byte) == (3, 0xE9)
    assert str(e.value) == "not UTF-8 text (byte 0xe9); save the file as UTF-8"


def test_a_file_is_read_whole_up_to_its_limit_with_the_stat_of_what_was_read(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"x" * 1024)
    got = read(f, 1024)
    assert got.data == b"x" * 1024 and got.stat.st_ino == f.stat().st_ino
    with pytest.raises(TooLarge, match=r"^larger than 1023 bytes$") as e:
        read(f, 1023)
    assert e.value.limit == 1023
    f.write_bytes(b"x" * ((1 << 20) + 1))
    with pytest.raises(TooLarge, match=r"^larger than 1 MiB$"):
        read(f, 1 << 20)


def test_a_fifo_and_a_device_are_refused_unread_and_a_directory_is_named(tmp_path):
    """Read whole, /dev/zero filled the memory and a FIFO without a writer held the
    reader up for good (the energy commands' inputs were read so)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    for given in (fifo, "/dev/zero"):
        with pytest.raises(NotARegularFile) as e:
            read(given, 1 << 20)
        assert e.value.strerror == "not a regular file (a FIFO, a socket or a device)" and e.value.filename == str(given)
    with pytest.raises(NotARegularFile, match=r"not a regular file or a pipe \(a device\)"):
        read("/dev/zero", 1 << 20, pipes=True)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    with pytest.raises(IsADirectoryError):
        read(tmp_path, 1 << 20)


def test_a_pipe_is_read_where_pipes_are_taken_and_one_without_a_writer_is_empty(tmp_path):
    """--data <(ssh host cat m.csv) or /dev/stdin: a pipe read to its end, however slow
    its writer, capped as a file is; a FIFO nobody writes reads as empty at once."""
    r, w = os.pipe()
    writer = subprocess.Popen([sys.executable, "-c", "import os, sys, time\nos.write(1, b'nsp,')\ntime.sleep(0.3)\n"
                               "os.write(1, b'time_s_mean\\n')"], stdout=w)
    os.close(w)
    try:
        assert read(f"/dev/fd/{r}", 1 << 20, pipes=True).data == b"nsp,time_s_mean\n"
    finally:
        os.close(r)
        writer.wait(timeout=10)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    assert read(fifo, 1 << 20, pipes=True).data == b""
    r, w = os.pipe()
    os.write(w, b"x" * 2048)
    os.close(w)
    with pytest.raises(TooLarge):
        read(f"/dev/fd/{r}", 1024, pipes=True)
    os.close(r)


def test_the_judge_sees_the_file_before_a_byte_is_read_and_may_refuse_it(tmp_path):
    f = tmp_path / "f"
    f.write_text("secret")
    seen = []

    def judge(st: os.stat_result) -> None:
        seen.append(st.st_size)
        raise PermissionError("not believed")

    with pytest.raises(PermissionError, match="not believed"):
        read(f, 100, judge)
    assert seen == [6]
    # one that lets the file through: what it does to the file shows in what is read after it
    assert read(f, 100, lambda st: f.write_text("")).data == b"", "read before the judge was asked"
