"""Input files are UTF-8 (YAML's encoding, and JSON's): one reading of them, whose
error says on which line the first byte that is not UTF-8 stands, so that a file saved
as Latin-1 is found and mended, not reported by Python's decoder at a byte offset."""

from __future__ import annotations


class NotUtf8(ValueError):
    """``line`` (1-based) holds ``byte``, the first that is not UTF-8."""

    def __init__(self, line: int, byte: int) -> None:
        super().__init__(f"not UTF-8 text (byte 0x{byte:02x}); save the file as UTF-8")
        self.line, self.byte = line, byte


def decode(data: bytes, *, bom: bool = False) -> str:
    """``data`` as text; NotUtf8 naming the line of its first byte that is not UTF-8.
    ``bom``: a leading byte-order mark is dropped (spreadsheets write one)."""
    try:
        return data.decode("utf-8-sig" if bom else "utf-8")
    except UnicodeDecodeError as exc:
        raise NotUtf8(data[: exc.start].count(b"\n") + 1, data[exc.start]) from None
