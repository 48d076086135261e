"""Network partitions between namespaces (nftables drops, tests/helpers/netns.py):

- ``broker-brokers``: one broker cut from the other brokers (replication and inter-broker requests;
  it keeps etcd and its clients, so it keeps its lease and leadership: the ISR must shrink);
- ``broker-etcd``: one broker cut from every etcd member (its lease expires: it must fence itself);
- ``clients-broker``: the harness's clients cut from one broker;
- ``broker-isolated``: one broker cut from everything;
- ``etcd-minority``: one etcd member cut from the other members and from the brokers.
"""

from __future__ import annotations

from .base import BROKER_TARGETS, Fault, Nemesis, pick_broker

VARIANTS = ("broker-brokers", "broker-etcd", "clients-broker", "broker-isolated", "etcd-minority")


class PartitionNemesis(Nemesis):
    kind = "partition"

    def unavailable(self) -> str | None:
        return None if self.ctx.cluster.lab is not None else "needs network namespaces (root)"

    def hold_s(self) -> float:
        return self.ctx.rng.uniform(5, 25)

    def start(self) -> Fault:
        ctx = self.ctx
        c = ctx.cluster
        lab = c.lab
        assert lab is not None
        variant = ctx.rng.choice(VARIANTS)
        broker_ips = {n: node.ip for n, node in c.broker_nodes.items()}
        etcd_ips = {n: node.ip for n, node in c.etcd_nodes.items()}
        if variant == "etcd-minority":
            i = ctx.rng.choice(sorted(etcd_ips))
            name = c.etcd_nodes[i].name
            peers = [ip for j, ip in etcd_ips.items() if j != i] + list(broker_ips.values())
            fault = self.fault(variant, f"etcd member {i}")
        else:
            node, what = pick_broker(ctx, ctx.rng.choice(BROKER_TARGETS))
            name = c.broker_nodes[node].name
            others = [ip for n, ip in broker_ips.items() if n != node]
            peers = {"broker-brokers": others, "broker-etcd": list(etcd_ips.values()),
                     "clients-broker": [c.client_ip],
                     "broker-isolated": others + list(etcd_ips.values()) + [c.client_ip]}[variant]
            fault = self.fault(variant, f"broker {node} ({what})")
        lab.cut(name, peers)
        fault.heal = lambda: lab.heal(name)
        return fault
