"""Import into the core and back: the same code and the same outputs, with no pass between."""

from __future__ import annotations

import pytest
import torch
import torch.fx

from fxopt.engine.bridge import Bridge


class Everything(torch.nn.Module):
    """Arguments of every kind fx allows: nested containers, slices with nodes, dtypes, kwargs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4, 5)
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x: torch.Tensor, n: int = 2) -> dict[str, torch.Tensor]:
        y = self.bn(self.conv(x)).mean(dim=(2, 3))
        z = self.fc(y).to(torch.float64) * self.scale
        k = z.size(1) - 2
        parts = torch.cat([z[:, :k], z[:, k:]], dim=-1)
        stacked = torch.stack((parts, parts.flip(-1)), 0)
        return {"out": stacked.sum(0, keepdim=False), "first": parts[..., 0:1:1]}


def _round_trip(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    return torch.fx.GraphModule(gm, Bridge(gm).rebuild())


def test_symbolic_graph_round_trips() -> None:
    model = Everything().eval()
    gm = torch.fx.symbolic_trace(model)
    rebuilt = _round_trip(gm)
    assert rebuilt.code == gm.code
    x = torch.randn(2, 3, 6, 6)
    expected, actual = gm(x), rebuilt(x)
    assert expected.keys() == actual.keys()
    for key in expected:
        assert torch.equal(expected[key], actual[key])
    assert [n.meta for n in gm.graph.nodes] == [n.meta for n in rebuilt.graph.nodes]


def test_sync_without_edits_changes_nothing() -> None:
    gm = torch.fx.symbolic_trace(Everything().eval())
    code = gm.code
    nodes = list(gm.graph.nodes)
    Bridge(gm).sync()
    assert gm.code == code
    assert list(gm.graph.nodes) == nodes


def test_exported_transformers_graph_round_trips() -> None:
    from transformers import BertConfig, BertModel

    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, vocab_size=100)
    model = BertModel(config).eval()
    ids = torch.randint(0, 100, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    gm = torch.export.export(model, (), {"input_ids": ids, "attention_mask": mask},
                             strict=False).module()
    graph = Bridge(gm).rebuild()
    assert graph.python_code("self").src == gm.graph.python_code("self").src
    gm.graph = graph
    gm.recompile()
    expected = model(input_ids=ids, attention_mask=mask).last_hidden_state
    assert torch.equal(gm(input_ids=ids, attention_mask=mask).last_hidden_state, expected)


def test_core_sees_module_and_tensor_metadata() -> None:
    gm = torch.fx.symbolic_trace(Everything().eval())
    bridge = Bridge(gm)
    assert len(bridge.session) == len(gm.graph.nodes)
    assert bridge.session.lint() == []
    # handles resolve to the very tensors of the module: nothing was copied on import
    conv_weight = gm.conv.weight
    registered = len(bridge.tensors)
    info = bridge.tensors.add(conv_weight)  # already registered: the same handle
    assert len(bridge.tensors) == registered
    assert bridge.tensors.tensor(info.handle) is conv_weight
    assert (info.shape, info.is_parameter) == (list(conv_weight.shape), True)


def test_import_finds_nodes_by_id_and_rejects_duplicates_and_foreign_nodes() -> None:
    gm = torch.fx.symbolic_trace(Everything().eval())
    session = Bridge(gm).session
    ids = session.node_ids()
    assert [session.node(id=i)[2] for i in ids] == [n.name for n in gm.graph.nodes]
    assert [session.py_node(id=i) for i in ids] == list(gm.graph.nodes)
    with pytest.raises(ValueError, match="no live node"):
        session.node(id=max(ids) + 1)

    duplicate = torch.fx.symbolic_trace(Everything().eval())
    first, second = list(duplicate.graph.nodes)[1:3]
    second.name = first.name
    with pytest.raises(ValueError, match=f"duplicate node name '{first.name}'"):
        Bridge(duplicate)

    foreign = torch.fx.symbolic_trace(Everything().eval())
    reader = list(foreign.graph.nodes)[2]
    reader.args = (list(gm.graph.nodes)[1],)
    with pytest.raises(ValueError, match="not in this graph"):
        Bridge(foreign)
