"""`frozenlake`: textarena's FrozenLake (4x4, 3 holes, start and goal in random opposite corners).

The model walks P to the goal G without stepping into a hole H, one bracketed move per turn. textarena's
FrozenLake-v0 fixes the start at the top-left, which leaves only 334 distinct boards, too few for disjoint
train and held-out sets; the "-random" variant used here (random opposite corners) has four times as many.
"""

from __future__ import annotations

from collections import deque
from typing import Any, ClassVar

from tasks.textgames import Layout, TextArenaGameBenchmark

_DELTAS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
Cell = tuple[int, int]


def _distances_to_goal(grid: list[str], goal: Cell) -> dict[Cell, int]:
    """Steps from every reachable non-hole cell to the goal (breadth-first from the goal)."""
    size = len(grid)
    dist = {goal: 0}
    queue = deque([goal])
    while queue:
        r, c = queue.popleft()
        for dr, dc in _DELTAS.values():
            nr, nc = r + dr, c + dc
            if 0 <= nr < size and 0 <= nc < size and grid[nr][nc] != "H" and (nr, nc) not in dist:
                dist[(nr, nc)] = dist[(r, c)] + 1
                queue.append((nr, nc))
    return dist


def _best_moves(grid: list[str], dist: dict[Cell, int], at: Cell) -> list[str]:
    if at not in dist:
        return []
    size = len(grid)
    return [
        move
        for move, (dr, dc) in _DELTAS.items()
        if 0 <= at[0] + dr < size
        and 0 <= at[1] + dc < size
        and dist.get((at[0] + dr, at[1] + dc)) == dist[at] - 1
    ]


class FrozenLakeBenchmark(TextArenaGameBenchmark):
    name = "frozenlake"
    description = (
        "FrozenLake (textarena, multi-turn): walk P to the goal G on a 4x4 frozen lake without falling into a hole H. "
        "Each turn the model sees the board and replies with one move: [up], [down], [left] or [right]. "
        "Score: success rate over held-out games (at most 12 replies each). Train/valid hold an optimal expert's turns."
    )
    header = "FrozenLake: walk P to G, avoid H."
    default_split_sizes: ClassVar[dict[str, int]] = {"test": 200, "valid": 100, "train": 600}

    def __init__(
        self,
        size: int = 4,
        num_holes: int = 3,
        randomize_start_goal: bool = True,
        max_turns: int = 12,
        split_sizes: dict[str, int] | None = None,
    ):
        self.size = size
        self.num_holes = num_holes
        self.randomize_start_goal = randomize_start_goal
        super().__init__(max_turns, split_sizes)

    def settings(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "num_holes": self.num_holes,
            "randomize_start_goal": self.randomize_start_goal,
            "max_turns": self.max_turns,
        }

    def _raw_env(self) -> Any:
        from textarena.envs.FrozenLake.env import FrozenLakeEnv

        return FrozenLakeEnv(
            size=self.size, num_holes=self.num_holes, randomize_start_goal=self.randomize_start_goal
        )

    def generate(self, seed: int) -> Layout:
        env = self._raw_env()
        env.reset(num_players=1, seed=seed)
        state = env.state.game_state
        return {
            "grid": ["".join(row) for row in state["grid"]],
            "start": list(state["player_pos"]),
            "goal": list(state["goal_pos"]),
        }

    def new_env(self, layout: Layout) -> Any:
        import textarena as ta

        env = self._raw_env()
        start, goal = tuple(layout["start"]), tuple(layout["goal"])
        env.player_pos, env.goal_pos = start, goal  # textarena measures partial progress from these
        env.state = ta.SinglePlayerState(num_players=1, seed=None, max_turns=100)
        env.state.reset(
            game_state={"grid": [list(row) for row in layout["grid"]], "player_pos": start, "goal_pos": goal},
            player_prompt_function=env._prompt,
        )
        env._observe_current_state()
        return env

    def board(self, env: Any) -> str:
        state = env.state.game_state
        rows = [[("_" if cell == " " else cell) for cell in row] for row in state["grid"]]
        r, c = state["player_pos"]
        rows[r][c] = "P"
        return "\n".join("".join(row) for row in rows)

    def solve(self, layout: Layout) -> list[str] | None:
        grid, at, goal = layout["grid"], tuple(layout["start"]), tuple(layout["goal"])
        dist = _distances_to_goal(grid, goal)
        if at not in dist:
            return None
        plan: list[str] = []
        while at != goal:
            move = _best_moves(grid, dist, at)[0]
            plan.append(move)
            at = (at[0] + _DELTAS[move][0], at[1] + _DELTAS[move][1])
        return plan

    def optimal_moves(self, env: Any, expert_move: str) -> list[str]:
        state = env.state.game_state
        grid = ["".join(row) for row in state["grid"]]
        return _best_moves(
            grid, _distances_to_goal(grid, tuple(state["goal_pos"])), tuple(state["player_pos"])
        )

    def optimal_from_prompt(self, prompt: str) -> list[str]:
        rows = self.board_rows(prompt)
        if len(rows) != self.size or any(len(row) != self.size for row in rows):
            return []
        found = {ch: (r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch in "PG"}
        if set(found) != {"P", "G"}:
            return []
        return _best_moves(rows, _distances_to_goal(rows, found["G"]), found["P"])
