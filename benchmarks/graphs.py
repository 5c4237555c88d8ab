"""The chat workload's graph: one node looping N times on one thread.

Each step appends 1-2 plain-dict messages of 200-500 bytes and sets two small LastValue keys.
Message text comes from a seeded generator of prose-like text, so both sides store exactly
the same data and compression (if any) sees text that compresses like real chat, not runs of
one byte. Messages use a
"speaker" key, not "role"/"type": LangGraph would turn role-dicts written to a DeltaChannel
into LangChain message objects, and the issue asks for plain dicts.
"""

from __future__ import annotations

import operator
import random
from typing import Annotated, Any, TypedDict, get_type_hints

from langgraph.channels import DeltaChannel
from langgraph.graph import END, START, StateGraph

VARIANTS: tuple[str, ...] = ("classic", "delta100", "delta_never", "wide")
"""`classic`: Annotated[list, operator.add]; `delta100`: DeltaChannel snapshotting every
100 updates; `delta_never`: a DeltaChannel whose frequency is never reached in N steps;
`wide`: delta100 plus `WIDE_KEYS` dict-valued keys, every one of them rewritten at every
step (an agent with a structured state: a plan, tool results, scores, ...)."""

CHAT_VARIANTS: tuple[str, ...] = ("classic", "delta100", "delta_never")
"""The variants with only the chat keys (our own runtime's workload runs these)."""

WIDE_KEYS = 16

NEVER = 10**9

_SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]


def _vocabulary(rng: random.Random, size: int = 3000) -> tuple[list[str], list[float]]:
    """Pseudo-words with Zipf-like frequencies: text that compresses about as well as
    prose (zstd -3 keeps ~40%), so a compressing saver gets no unrealistic help."""
    words = sorted(
        {"".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(size)}
    )
    rng.shuffle(words)
    cumulative, total = [], 0.0
    for rank in range(len(words)):
        total += 1.0 / (rank + 1) ** 0.6
        cumulative.append(total)
    return words, cumulative


def add_batches(state: list[Any], batches: list[Any]) -> list[Any]:
    """Batched reducer for DeltaChannel: each write is a list of messages to append."""
    out = list(state)
    for batch in batches:
        out.extend(batch if isinstance(batch, list) else [batch])
    return out


class ClassicChat(TypedDict):
    messages: Annotated[list, operator.add]
    turn: int
    mood: str


class Delta100Chat(TypedDict):
    messages: Annotated[list, DeltaChannel(add_batches, snapshot_frequency=100)]
    turn: int
    mood: str


class DeltaNeverChat(TypedDict):
    messages: Annotated[list, DeltaChannel(add_batches, snapshot_frequency=NEVER)]
    turn: int
    mood: str


_WIDE_FIELDS: dict[str, Any] = {
    **get_type_hints(Delta100Chat, include_extras=True),
    **{f"k{i}": dict for i in range(WIDE_KEYS)},
}
WideChat = TypedDict("WideChat", _WIDE_FIELDS)  # type: ignore[misc]

SCHEMAS: dict[str, type] = {
    "classic": ClassicChat,
    "delta100": Delta100Chat,
    "delta_never": DeltaNeverChat,
    "wide": WideChat,
}


def wide_values(turn: int) -> dict[str, Any]:
    """The `wide` variant's keys at `turn`: small dicts of 100-200 bytes, each changed."""
    return {
        f"k{i}": {
            "turn": turn,
            "key": i,
            "score": round(turn * 0.37 + i, 3),
            "status": ("pending", "running", "done")[(turn + i) % 3],
            "note": f"step {turn} of key {i}: " + "x" * ((turn * 7 + i * 13) % 60),
            "tags": [f"t{(turn + j) % 9}" for j in range(i % 4 + 1)],
        }
        for i in range(WIDE_KEYS)
    }


def _text(rng: random.Random, vocab: tuple[list[str], list[float]], size: int) -> str:
    words, cumulative = vocab
    out: list[str] = []
    length, capital = 0, True
    while length < size:
        roll = rng.random()
        word = (
            str(rng.randint(0, 99_999))
            if roll < 0.06
            else rng.choices(words, cum_weights=cumulative)[0]
        )
        if capital:
            word = word.capitalize()
        capital = roll > 0.93
        if capital:
            word += "."
        elif roll > 0.88:
            word += ","
        out.append(word)
        length += len(word) + 1
    return " ".join(out)[:size]


def make_messages(n: int, seed: int = 7) -> list[list[dict[str, Any]]]:
    """The messages appended at each of the `n` steps (precomputed: not part of the timing).

    Each message serializes to 200-500 bytes; odd steps append two (a tool result and the
    assistant's answer), even steps one.
    """
    rng = random.Random(seed)
    vocab = _vocabulary(random.Random(seed + 1))
    steps: list[list[dict[str, Any]]] = []
    for turn in range(n):
        count = 2 if turn % 2 else 1
        batch = []
        for k in range(count):
            speaker = "assistant" if k == count - 1 else "tool"
            content = _text(rng, vocab, rng.randint(160, 440))
            batch.append(
                {"speaker": speaker, "content": content, "id": f"m-{turn}-{k}", "turn": turn}
            )
        steps.append(batch)
    return steps


def first_input(n: int) -> dict[str, Any]:
    return {
        "messages": [{"speaker": "user", "content": "let us talk " * 20, "id": "u-0", "turn": -1}],
        "turn": 0,
        "mood": "curious",
    }


def chat_builder(variant: str, steps: list[list[dict[str, Any]]]) -> StateGraph:
    """LangGraph graph for `variant`: loops until `turn` reaches len(steps)."""
    n = len(steps)

    wide = variant == "wide"

    def chat(state: dict[str, Any]) -> dict[str, Any]:
        turn = state["turn"]
        update = {
            "messages": steps[turn],
            "turn": turn + 1,
            "mood": "fine" if turn % 2 else "ok",
        }
        return {**update, **wide_values(turn)} if wide else update

    def route(state: dict[str, Any]) -> str:
        return END if state["turn"] >= n else "chat"

    builder = StateGraph(SCHEMAS[variant])
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    builder.add_conditional_edges("chat", route, ["chat", END])
    return builder


def run_config(thread_id: str, n: int) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}, "recursion_limit": n + 20}
