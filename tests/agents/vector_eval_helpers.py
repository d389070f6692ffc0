"""A scripted agent that acts in batches (``act_batch``), for the vector-env evaluation tests."""

from __future__ import annotations


class BatchedScript:
    """Searches the question, then a word of the first result's title, then answers with the
    first word it read: a deterministic agent that only reads observations and infos."""

    def __init__(self) -> None:
        self.turns: dict[int, int] = {}
        self.last: dict[int, str] = {}

    def reset(self) -> None:
        self.turns.clear()
        self.last.clear()

    def _act(self, slot: int, obs: str, info: dict) -> str:
        turn = 0 if info.get("turn") == 0 else self.turns.get(slot, 0)
        self.turns[slot] = turn + 1
        words = [w.strip(".,?:()\"'<>/") for w in str(obs).split()]
        words = [w for w in words if w.istitle() and len(w) > 3]
        if turn == 0:
            self.last[slot] = words[-1] if words else "river"
            return f"<search>{' '.join(words[-3:]) or 'river'}</search>"
        if turn == 1:
            return f"<think>next</think><search>{words[0] if words else 'lake'}</search>"
        return f"<answer>{self.last.get(slot, 'x')}</answer>"

    def act(self, obs: str, info: dict) -> str:
        return self._act(0, obs, info)

    def act_batch(self, observations, infos, *, active=None):
        from hopgym.agents.llm import unbatch_infos

        per = unbatch_infos(infos, len(observations))
        return [
            self._act(i, o, per[i]) if active is None or active[i] else "" for i, o in enumerate(observations)
        ]
