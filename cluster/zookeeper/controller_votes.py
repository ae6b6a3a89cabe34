"""Brokers' votes that the controller is unheard: a dead controller replaced before its
ZooKeeper session ends.

A controller's /controller is ephemeral: no other broker may take it while the
controller's session lasts. After kill -9 that is a whole session timeout; after kill -9
while ZooKeeper is down, a whole session timeout after ZooKeeper is back (it gives every
session a fresh timeout when it starts). Meanwhile nobody fences or elects, and the dead
controller's partitions have no leader. KRaft elects its controller among a quorum that
votes; here the brokers vote through ZooKeeper, which stays the only arbiter:

    /controller_unheard/<voter id>   ephemeral, {"version":1,"controller":C,
                                     "epoch_zk_version":V}: broker <voter id> has had no
                                     heartbeat answered by controller C, elected at version
                                     V of /controller_epoch, for broker.session.timeout.ms

When the votes naming the same election come from a majority of the registered brokers
(C itself counted among the registered, never as a voter), a voter deletes /controller in
one multi with a check of /controller_epoch at version V: a controller elected since (a
new version) is never deleted for an older election's votes. Every controller write
checks /controller_epoch's version (KAFKA-6082), so a deposed controller that is still
alive (stopped, or cut off from the brokers) can write nothing once another is elected,
and the brokers refuse its older controller epoch.

A controller that resigns because it heard no majority (cluster/controller/fencing.py)
votes so about itself first: its own vote about its own election, read by the next
controller as the majority's.

A broker cut off alone from the controller never makes a majority: votes need the other
brokers to hear nothing from it too. A cluster of two brokers never deletes (one voter is
not a majority of two): its controller is replaced when its session ends, as before.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

__all__ = [
    "UNHEARD_PATH",
    "Vote",
    "cast",
    "majority_against",
    "read_votes",
    "vote_path",
    "withdraw",
]

UNHEARD_PATH = "/controller_unheard"


@attrs.frozen
class Vote:
    controller: int
    epoch_zk_version: int

    def encode(self) -> bytes:
        return json.dumps(
            {
                "version": 1,
                "controller": self.controller,
                "epoch_zk_version": self.epoch_zk_version,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> Vote | None:
        try:
            doc = json.loads(data)
            return cls(int(doc["controller"]), int(doc["epoch_zk_version"]))
        except (ValueError, KeyError, TypeError):
            return None  # not ours to judge: counted as no vote


def vote_path(voter: int) -> str:
    return f"{UNHEARD_PATH}/{voter}"


async def cast(zk: Any, voter: int, vote: Vote) -> None:
    """Write `voter`'s vote (ephemeral: it goes with the voter's session)."""
    from kazoo.exceptions import NodeExistsError

    try:
        await zk.create(vote_path(voter), vote.encode(), ephemeral=True, makepath=True)
    except NodeExistsError:
        await zk.set(vote_path(voter), vote.encode())


async def withdraw(zk: Any, voter: int) -> None:
    """Delete `voter`'s vote, if it has one."""
    from kazoo.exceptions import NoNodeError

    try:
        await zk.delete(vote_path(voter))
    except NoNodeError:
        pass


async def read_votes(zk: Any) -> dict[int, Vote]:
    """Every broker's vote (voter id -> vote); none when the parent is not there yet."""
    from kazoo.exceptions import NoNodeError

    try:
        children = await zk.get_children(UNHEARD_PATH)
    except NoNodeError:
        return {}
    voters = [int(c) for c in children if c.isdigit()]
    votes: dict[int, Vote] = {}
    for voter, result in zip(
        voters, await zk.get_many([vote_path(v) for v in voters]), strict=True
    ):
        if not isinstance(result, Exception) and (vote := Vote.decode(result[0])) is not None:
            votes[voter] = vote
    return votes


def majority_against(votes: dict[int, Vote], vote: Vote, registered: set[int]) -> list[int]:
    """The registered voters casting `vote`, when they are a majority of the registered
    brokers (the controller among them); else none."""
    voters = sorted(
        v for v, cast in votes.items() if cast == vote and v in registered and v != vote.controller
    )
    everyone = registered | {vote.controller}
    return voters if len(everyone) >= 3 and 2 * len(voters) > len(everyone) else []
