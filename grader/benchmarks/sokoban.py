"""`sokoban`: textarena's Sokoban-v0 (6x6 rooms, 3 boxes, 30 turns).

The model pushes every box X onto a target O, one bracketed move per turn; boxes can be pushed, never pulled.
Rooms come from textarena's generator (reverse play from a solved room, deadlock-checked); games whose shortest
solution exceeds the turn limit are left out, so every held-out game can be won.
"""

from __future__ import annotations

from collections import deque
from typing import Any, ClassVar

from grader.benchmarks.textgames import Layout, TextArenaGameBenchmark

_DELTAS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
WALL, FLOOR, TARGET, BOX_ON_TARGET, BOX, PLAYER = range(6)  # textarena's cell codes
_GLYPHS = {WALL: "#", FLOOR: "_", TARGET: "O", BOX_ON_TARGET: "*", BOX: "X"}
MAX_SEARCH_STATES = 500_000
Cell = tuple[int, int]


def _cells(rows: list[str], *codes: int) -> list[Cell]:
    return [(r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if int(ch) in codes]


def solve_room(fixed: list[str], state: list[str]) -> list[str] | None:
    """Shortest move sequence that puts every box on a target (breadth-first over player and box positions)."""
    walls = set(_cells(fixed, WALL))
    targets = frozenset(_cells(fixed, TARGET))
    start = (_cells(state, PLAYER)[0], frozenset(_cells(state, BOX, BOX_ON_TARGET)))
    parents: dict[tuple[Cell, frozenset[Cell]], tuple[Any, str] | None] = {start: None}
    queue = deque([start])
    while queue:
        current = queue.popleft()
        player, boxes = current
        if boxes <= targets:
            plan: list[str] = []
            node = current
            while (link := parents[node]) is not None:
                node, move = link
                plan.append(move)
            return plan[::-1]
        if len(parents) > MAX_SEARCH_STATES:
            return None
        for move, (dr, dc) in _DELTAS.items():
            step = (player[0] + dr, player[1] + dc)
            if step in walls:
                continue
            moved = boxes
            if step in boxes:
                pushed = (step[0] + dr, step[1] + dc)
                if pushed in walls or pushed in boxes:
                    continue
                moved = (boxes - {step}) | {pushed}
            nxt = (step, moved)
            if nxt not in parents:
                parents[nxt] = (current, move)
                queue.append(nxt)
    return None


class SokobanBenchmark(TextArenaGameBenchmark):
    name = "sokoban"
    description = (
        "Sokoban (textarena, multi-turn): push every box X onto a target O in a 6x6 room; boxes can be pushed, not "
        "pulled. Each turn the model sees the room and replies with one move: [up], [down], [left] or [right]. "
        "Score: success rate over held-out rooms (at most 30 replies each). Train/valid hold an optimal expert's turns."
    )
    header = "Sokoban: push every X onto an O."
    default_split_sizes: ClassVar[dict[str, int]] = {"test": 100, "valid": 30, "train": 150}

    def __init__(
        self,
        dim_room: tuple[int, int] = (6, 6),
        num_boxes: int = 3,
        max_turns: int = 30,
        split_sizes: dict[str, int] | None = None,
    ):
        self.dim_room = dim_room
        self.num_boxes = num_boxes
        self.max_turns = max_turns
        self.split_sizes = dict(
            split_sizes or self.default_split_sizes
        )  # games per split (test, valid, train)

    def settings(self) -> dict[str, Any]:
        return {"dim_room": list(self.dim_room), "num_boxes": self.num_boxes, "max_turns": self.max_turns}

    def _raw_env(self) -> Any:
        from textarena.envs.Sokoban.env import SokobanEnv

        return SokobanEnv(dim_room=self.dim_room, max_turns=self.max_turns, num_boxes=self.num_boxes)

    def generate(self, seed: int) -> Layout:
        env = self._raw_env()
        env.reset(num_players=1, seed=seed)
        return {
            "fixed": ["".join(str(int(v)) for v in row) for row in env.room_fixed],
            "state": ["".join(str(int(v)) for v in row) for row in env.room_state],
        }

    def new_env(self, layout: Layout) -> Any:
        import numpy as np
        import textarena as ta

        env = self._raw_env()
        env.room_fixed = np.array([[int(ch) for ch in row] for row in layout["fixed"]])
        env.room_state = np.array([[int(ch) for ch in row] for row in layout["state"]])
        env.box_mapping = {}
        env.player_position = np.argwhere(env.room_state == PLAYER)[0]
        env.state = ta.SinglePlayerState(num_players=1, max_turns=self.max_turns, seed=None)
        env.state.reset(
            game_state={"board": env.create_board_str(env.room_state)},
            player_prompt_function=env._generate_player_prompt,
        )
        env._observe_current_state()
        return env

    def board(self, env: Any) -> str:
        lines = []
        for state_row, fixed_row in zip(env.room_state, env.room_fixed, strict=True):
            glyphs = []
            for cell, under in zip(state_row, fixed_row, strict=True):
                if int(cell) == PLAYER:
                    glyphs.append("+" if int(under) == TARGET else "P")
                else:
                    glyphs.append(_GLYPHS[int(cell)])
            lines.append("".join(glyphs))
        return "\n".join(lines)

    def solve(self, layout: Layout) -> list[str] | None:
        return solve_room(layout["fixed"], layout["state"])
