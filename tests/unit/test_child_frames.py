"""The parent reads a python child's messages several per system call (`Frames`), framed
as `multiprocessing.connection.Connection.send` writes them."""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection

import pytest

from noetl.worker.python_child import READ_BYTES, Frames


@pytest.fixture
def pipe() -> Iterator[tuple[Frames, Connection]]:
    reader, writer = multiprocessing.Pipe(duplex=False)
    try:
        yield Frames(reader.fileno()), writer
    finally:
        reader.close()
        if not writer.closed:
            writer.close()


def drain(frames: Frames, count: int) -> list[object]:
    messages: list[object] = []
    while len(messages) < count:
        got, message = frames.next()
        if got:
            messages.append(message)
        else:
            frames.fill()
    return messages


def test_several_messages_come_in_one_read(pipe: tuple[Frames, Connection]) -> None:
    frames, writer = pipe
    sent = [("ok", i, "x" * i) for i in range(20)]
    for message in sent:
        writer.send(message)
    frames.fill()  # one read takes them all (they fit in the pipe and in READ_BYTES)
    got = []
    while True:
        ok, message = frames.next()
        if not ok:
            break
        got.append(message)
    assert got == sent
    assert frames.buffer == bytearray()


def test_a_message_larger_than_a_read_is_put_together(pipe: tuple[Frames, Connection]) -> None:
    frames, writer = pipe
    big = ("ok", "y" * (5 * READ_BYTES + 123), [1, 2, 3])

    def send() -> None:
        writer.send(big)
        writer.send(("ok", "after"))

    sender = threading.Thread(target=send)
    sender.start()  # a pipe holds less than the message: it is written while read
    assert drain(frames, 2) == [big, ("ok", "after")]
    sender.join()


def test_a_message_cut_by_the_writer_closing_is_an_eof(pipe: tuple[Frames, Connection]) -> None:
    frames, writer = pipe
    payload = b"\x80\x04\x95"  # the start of a pickle, never finished
    os.write(writer.fileno(), (100).to_bytes(4, "big", signed=True) + payload)
    writer.close()
    frames.fill()
    assert frames.next() == (False, None)  # not whole: nothing is made up
    with pytest.raises(EOFError):
        frames.fill()


def test_an_empty_pipe_that_is_closed_is_an_eof(pipe: tuple[Frames, Connection]) -> None:
    frames, writer = pipe
    writer.close()
    with pytest.raises(EOFError):
        frames.fill()
