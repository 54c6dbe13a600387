"""An MCP server over stdio, driven from synchronous code (the verifier is synchronous).

    server = McpServer(["python", "server.py"], cwd=pack_dir)
    server.tools()                                  # tools/list: MCP Tool objects as dicts
    server.call("search_issues", {"text": "login"}) # CallResult: canonical JSON, or the error
    server.close()

Uses the official SDK (`mcp`, 2.x): `stdio_client` starts the process and
`Client` speaks the protocol. The SDK is asynchronous and its transport must be
opened and closed in one task, so one background thread runs an event loop and,
per server process, one task that opens the connection, serves calls from a
queue and closes it. A call that hangs past its timeout, or a server that
exits, ends that task (the SDK stops the process); the next call starts a fresh
server. Nothing here raises to the caller: failures are CallResults with a
reason, and a server that cannot start is retried at most `MAX_FAILED_STARTS`
times in a row.

The server runs with the caller's environment (it may need its own keys) and,
unlike the Python-functions sandbox, with the network: it is the user's server.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any, Sequence

from appliance.userworld.episode import CallResult

log = logging.getLogger(__name__)

MAX_FAILED_STARTS = 3
STDERR_TAIL_CHARS = 400
SHUTDOWN_GRACE_S = 10.0  # the SDK closes stdin, then SIGTERM, then SIGKILL, a few seconds each


class McpServer:
    """One MCP server command; started on first use and restarted after it dies or hangs."""

    def __init__(self, command: Sequence[str], *, cwd: Path | None = None, timeout_s: float = 10.0,
                 startup_s: float = 30.0) -> None:
        if not command:
            raise ValueError("an MCP server needs a command")
        self.command = list(command)
        self.cwd = Path(cwd) if cwd else None
        self.timeout_s = timeout_s
        self.startup_s = startup_s
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-client", daemon=True)
        self._thread.start()
        self._connection: _Connection | None = None
        self._closed = False
        self._failed_starts = 0
        self._start_error = ""
        self._finalizer = weakref.finalize(self, _shut_down, self._loop, self._thread, self.__dict__)

    # --- public ----------------------------------------------------------------------------

    def tools(self) -> list[dict[str, Any]]:
        """tools/list, every page, as plain dicts (name, description, inputSchema, annotations).

        Raises ConnectionError with the reason when the server cannot be reached.
        """
        with self._lock:
            connection = self._connected()
            if connection is None:
                raise ConnectionError(self._start_error)
            return connection.tools

    def call(self, name: str, arguments: dict[str, Any]) -> CallResult:
        """tools/call. Never raises: a tool error, a hang or a dead server is a CallResult with `error`."""
        with self._lock:
            connection = self._connected()
            if connection is None:
                return CallResult(error=self._start_error, lost=True)
            future: concurrent.futures.Future = concurrent.futures.Future()
            self._loop.call_soon_threadsafe(connection.requests.put_nowait, (name, arguments, future))
            try:
                return future.result(timeout=self.timeout_s + SHUTDOWN_GRACE_S)
            except concurrent.futures.TimeoutError:
                self._connection = None
                return CallResult(error=f"{name}: the MCP server neither answered nor stopped; it was abandoned",
                                  lost=True)

    def close(self) -> None:
        """Stop the server and the client's thread; final (later calls answer that the client is closed)."""
        with self._lock:
            self._closed = True
            self._finalizer()

    # --- connection lifetime ---------------------------------------------------------------

    def _connected(self) -> "_Connection | None":
        if self._connection is not None and not self._connection.finished.is_set():
            return self._connection
        self._connection = None
        if self._closed:
            self._start_error = f"the MCP client for `{' '.join(self.command)}` was closed"
            return None
        if self._failed_starts >= MAX_FAILED_STARTS:
            return None
        connection = _Connection(self)
        asyncio.run_coroutine_threadsafe(connection.serve(), self._loop)
        try:
            connection.ready.result(timeout=self.startup_s + SHUTDOWN_GRACE_S)
        except Exception as err:  # noqa: BLE001 - any start failure becomes the reason of every call
            self._failed_starts += 1
            tries = f" (tried {self._failed_starts} times; giving up)" if self._failed_starts >= MAX_FAILED_STARTS else ""
            self._start_error = f"the MCP server `{' '.join(self.command)}` did not start: {_reason(err)}" \
                                f"{connection.stderr_tail('; stderr: ')}{tries}"
            return None
        self._failed_starts = 0
        self._connection = connection
        return connection


class _Connection:
    """One server process: opened, served and closed by one task on the client's loop."""

    def __init__(self, owner: McpServer) -> None:
        self.owner = owner
        self.ready: concurrent.futures.Future = concurrent.futures.Future()
        self.finished = threading.Event()  # takes no more calls (it may still be shutting the server down)
        self.closed: concurrent.futures.Future = concurrent.futures.Future()
        self.requests: asyncio.Queue | None = None
        self.tools: list[dict[str, Any]] = []
        self.stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        self._tail: str | None = None  # the stderr's last line, kept when the file is closed

    async def serve(self) -> None:
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        owner = self.owner
        self.requests = asyncio.Queue()
        parameters = StdioServerParameters(command=owner.command[0], args=owner.command[1:], env=dict(os.environ),
                                           cwd=str(owner.cwd) if owner.cwd else None)
        try:
            async with Client(stdio_client(parameters, errlog=self.stderr), mode="legacy", cache=None,
                              read_timeout_seconds=max(owner.startup_s, owner.timeout_s)) as client:
                async with asyncio.timeout(owner.startup_s):
                    self.tools = await _list_tools(client)
                self.ready.set_result(True)
                await self._serve_calls(client)
                self.finished.set()
        except BaseException as err:  # noqa: BLE001 - reported through the futures
            if not self.ready.done():
                self.ready.set_exception(err if isinstance(err, Exception) else RuntimeError(str(err)))
            else:
                log.debug("MCP connection ended: %r", err)
        finally:
            self.finished.set()
            self._fail_pending()
            self._tail = self._last_stderr_line()
            self.stderr.close()
            if not self.closed.done():
                self.closed.set_result(True)

    async def _serve_calls(self, client: Any) -> None:
        from mcp import MCPError

        timeout = self.owner.timeout_s
        while True:
            request = await self.requests.get()
            if request is None:
                return
            name, arguments, future = request
            try:
                async with asyncio.timeout(timeout):
                    result = await client.call_tool(name, arguments)
            except TimeoutError:
                self.finished.set()
                future.set_result(CallResult(error=f"{name} did not answer within {timeout:g} s (hung?); "
                                                   "the MCP server was restarted", lost=True))
                return
            except MCPError as err:
                if _connection_lost(err):
                    self.finished.set()
                    future.set_result(CallResult(error=f"the MCP server died during {name} ({err}); it was "
                                                       f"restarted{self.stderr_tail('; stderr: ')}", lost=True))
                    return
                future.set_result(CallResult(error=f"{name} failed: {_reason(err)}"))
                continue
            except Exception as err:  # noqa: BLE001 - a malformed answer is this call's error
                future.set_result(CallResult(error=f"{name}: the MCP server's answer was unusable ({_reason(err)})"))
                continue
            future.set_result(_call_result(name, result))

    def _fail_pending(self) -> None:
        while self.requests is not None and not self.requests.empty():
            request = self.requests.get_nowait()
            if request is not None:
                request[2].set_result(CallResult(error=f"{request[0]}: the MCP server connection closed", lost=True))

    def stderr_tail(self, prefix: str = "") -> str:
        tail = self._tail if self._tail is not None else self._last_stderr_line()
        return f"{prefix}{tail}" if tail else ""

    def _last_stderr_line(self) -> str:
        try:
            self.stderr.flush()
            self.stderr.seek(0, os.SEEK_END)
            size = self.stderr.tell()
            self.stderr.seek(max(0, size - STDERR_TAIL_CHARS))
            lines = [line for line in self.stderr.read().splitlines() if line.strip()]
        except (OSError, ValueError):
            return ""
        return lines[-1].strip()[:200] if lines else ""


async def _list_tools(client: Any) -> list[dict[str, Any]]:
    tools, cursor = [], None
    for _ in range(100):  # a server that pages forever must not hang the start
        page = await client.list_tools(cursor=cursor)
        tools.extend(tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _call_result(name: str, result: Any) -> CallResult:
    content = [_content(block) for block in (result.content or [])]
    if result.is_error:
        text = " ".join(c for c in content if isinstance(c, str)) or "no message"
        return CallResult(error=f"{name} returned an error: {' '.join(text.split())[:200]}")
    value = result.structured_content if result.structured_content is not None else content
    return CallResult(value=json.dumps(value, sort_keys=True, ensure_ascii=False, default=str))


def _content(block: Any) -> Any:
    """A content block as a value: text that is JSON as that JSON (layout must not matter), else as text."""
    text = getattr(block, "text", None)
    if not isinstance(text, str):
        return block.model_dump(mode="json", exclude_none=True)
    if text[:1] in "{[":
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def _connection_lost(err: Exception) -> bool:
    return "connection closed" in str(err).lower()


def _reason(err: BaseException) -> str:
    if isinstance(err, BaseExceptionGroup) and err.exceptions:
        return _reason(err.exceptions[0])
    if isinstance(err, TimeoutError):
        return "it did not answer in time"
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}"[:200] if text else type(err).__name__


def _shut_down(loop: asyncio.AbstractEventLoop, thread: threading.Thread, state: dict[str, Any]) -> None:
    connection = state.get("_connection")
    if connection is not None and not connection.closed.done() and loop.is_running():
        loop.call_soon_threadsafe(connection.requests.put_nowait, None)
        try:
            connection.closed.result(timeout=SHUTDOWN_GRACE_S)
        except Exception:  # noqa: BLE001
            pass
    if loop.is_running():
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=2)
    if not loop.is_running() and not loop.is_closed():
        loop.close()
