"""Commands share a worktree; a git that reads its files has it to itself (``WorktreeQuiet``)."""

from __future__ import annotations

import asyncio

from actors.workspace.quiet import WorktreeQuiet


async def test_git_waits_for_commands_and_new_commands_wait_for_git() -> None:
    quiet = WorktreeQuiet()
    order: list[str] = []
    first_started, release_first = asyncio.Event(), asyncio.Event()

    async def command(name: str, release: asyncio.Event | None = None) -> None:
        async with quiet.shared():
            order.append(f"{name} runs")
            if release is not None:
                first_started.set()
                await release.wait()
            order.append(f"{name} ends")

    async def git() -> None:
        async with quiet.quiet():
            order.append("git runs")
            await asyncio.sleep(0)
            order.append("git ends")

    first = asyncio.create_task(command("one", release_first))
    await first_started.wait()
    second = asyncio.create_task(command("two"))  # commands share: it runs alongside
    await second
    reading = asyncio.create_task(git())
    await asyncio.sleep(0.01)
    third = asyncio.create_task(command("three"))  # queued behind the waiting git
    await asyncio.sleep(0.01)
    assert order == ["one runs", "two runs", "two ends"]
    release_first.set()
    await asyncio.gather(first, reading, third)
    assert order[3:] == ["one ends", "git runs", "git ends", "three runs", "three ends"]


async def test_a_git_that_gives_up_waiting_lets_commands_go() -> None:
    quiet = WorktreeQuiet()
    hold, started = asyncio.Event(), asyncio.Event()

    async def long_command() -> None:
        async with quiet.shared():
            started.set()
            await hold.wait()

    running = asyncio.create_task(long_command())
    await started.wait()
    waiting = asyncio.create_task(quiet.quiet().__aenter__())
    await asyncio.sleep(0.01)
    waiting.cancel()
    await asyncio.sleep(0)

    async def short_command() -> str:
        async with quiet.shared():
            return "ran"

    assert await asyncio.wait_for(short_command(), 5) == "ran"
    hold.set()
    await running
