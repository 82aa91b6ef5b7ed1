"""The queues of a run, by name: the path a prompt group takes.

::

    controller ──► PROMPTS ──► inference worker ──► ROLLOUTS ──► trainer
                                      │ (verifier.placement: stage)  ▲
                                      └──► TO_VERIFY ──► verifier ───┘

With inline judging a worker judges its own completions and puts them on ``ROLLOUTS``;
with the verifier stage it puts them, unjudged, on ``TO_VERIFY``, and verifiers judge
them and put them on ``ROLLOUTS``. Every hop is leased and keyed by the group's id, so a
killed worker's or verifier's groups come back, and a group arrives at most once.
"""

PROMPTS = "prompts"
TO_VERIFY = "to_verify"
ROLLOUTS = "rollouts"
