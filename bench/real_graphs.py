"""BERT and GPT-2 as transformers 4 wrote them, for benchmarks on realistic module-level graphs.

transformers 5 removed `transformers.utils.fx` and its models no longer trace with
`torch.fx.symbolic_trace`, so Optimum's passes (written for those call_module graphs) have no
real graph to run on. These are the forward passes of transformers 4.x `modeling_bert.py` and
`modeling_gpt2.py` (eager attention, inference), line for line where tracing allows (a constant
`finfo(float32).min` where transformers read it from a traced dtype), stacked to any depth.
Each builds a `torch.fx.symbolic_trace` graph taking `input_ids` and `attention_mask`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

FLOAT_MIN = torch.finfo(torch.float32).min
VOCAB, POSITIONS = 100, 64


class BertSelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.num_attention_heads, self.attention_head_size = heads, hidden // heads
        self.all_head_size = hidden
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.dropout = nn.Dropout(0.1)

    def transpose_for_scores(self, x: torch.Tensor) -> torch.Tensor:
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_x_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mixed_query_layer = self.query(hidden_states)
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        query_layer = self.transpose_for_scores(mixed_query_layer)
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_scores = attention_scores + attention_mask
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        attention_probs = self.dropout(attention_probs)
        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        return context_layer.view(new_context_layer_shape)


class BertResidual(nn.Module):
    """BertSelfOutput and BertOutput: dense, dropout, LayerNorm of the residual sum."""

    def __init__(self, inner: int, hidden: int) -> None:
        super().__init__()
        self.dense = nn.Linear(inner, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        hidden_states = self.dropout(self.dense(hidden_states))
        return self.LayerNorm(hidden_states + input_tensor)


class BertLayer(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.attention = BertSelfAttention(hidden, heads)
        self.attention_output = BertResidual(hidden, hidden)
        self.intermediate = nn.Linear(hidden, 4 * hidden)
        self.intermediate_act_fn = nn.GELU()
        self.output = BertResidual(4 * hidden, hidden)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        attention_output = self.attention_output(self.attention(hidden_states, attention_mask), hidden_states)
        intermediate_output = self.intermediate_act_fn(self.intermediate(attention_output))
        return self.output(intermediate_output, attention_output)


class Bert(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(VOCAB, hidden)
        self.position_embeddings = nn.Embedding(POSITIONS, hidden)
        self.token_type_embeddings = nn.Embedding(2, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.1)
        self.register_buffer("position_ids", torch.arange(POSITIONS).expand((1, -1)))
        self.layer = nn.ModuleList(BertLayer(hidden, heads) for _ in range(layers))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        seq_length = input_ids.size(1)
        position_ids = self.position_ids.narrow(1, 0, seq_length)  # [:, :seq_length], traceable
        token_type_ids = torch.zeros_like(input_ids)
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(position_ids)
        hidden_states = self.dropout(self.LayerNorm(embeddings))
        extended_attention_mask = attention_mask[:, None, None, :].to(torch.float32)
        extended_attention_mask = (1.0 - extended_attention_mask) * FLOAT_MIN
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, extended_attention_mask)
        return hidden_states


class Conv1D(nn.Module):
    """GPT-2's Linear with a transposed [in, out] weight, computed with addmm."""

    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class NewGELUActivation(nn.Module):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.num_heads, self.head_dim, self.split_size = heads, hidden // heads, hidden
        self.register_buffer(
            "bias", torch.tril(torch.ones((POSITIONS, POSITIONS), dtype=torch.bool)).view(1, 1, POSITIONS, POSITIONS)
        )
        self.c_attn, self.c_proj = Conv1D(3 * hidden, hidden), Conv1D(hidden, hidden)
        self.attn_dropout, self.resid_dropout = nn.Dropout(0.1), nn.Dropout(0.1)

    def _split_heads(self, tensor: torch.Tensor) -> torch.Tensor:
        new_shape = tensor.size()[:-1] + (self.num_heads, self.head_dim)
        return tensor.view(new_shape).permute(0, 2, 1, 3)

    def _merge_heads(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        new_shape = tensor.size()[:-2] + (self.num_heads * self.head_dim,)
        return tensor.view(new_shape)

    def _attn(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor
    ) -> torch.Tensor:
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / torch.full([], value.size(-1) ** 0.5, dtype=torch.float32)
        query_length, key_length = query.size(-2), key.size(-2)
        # self.bias[:, :, key_length - query_length : key_length, :key_length], traceable
        causal_mask = self.bias.narrow(2, key_length - query_length, query_length).narrow(3, 0, key_length)
        mask_value = torch.full([], FLOAT_MIN, dtype=torch.float32)
        attn_weights = torch.where(causal_mask, attn_weights, mask_value)
        attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = self.attn_dropout(attn_weights)
        return torch.matmul(attn_weights, value)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        query, key, value = self._split_heads(query), self._split_heads(key), self._split_heads(value)
        attn_output = self._merge_heads(self._attn(query, key, value, attention_mask))
        return self.resid_dropout(self.c_proj(attn_output))


class GPT2MLP(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.c_fc, self.c_proj = Conv1D(4 * hidden, hidden), Conv1D(hidden, 4 * hidden)
        self.act, self.dropout = NewGELUActivation(), nn.Dropout(0.1)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(hidden_states))))


class GPT2Block(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.attn, self.mlp = GPT2Attention(hidden, heads), GPT2MLP(hidden)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden_states = self.attn(self.ln_1(hidden_states), attention_mask) + hidden_states
        return self.mlp(self.ln_2(hidden_states)) + hidden_states


class GPT2(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, hidden), nn.Embedding(POSITIONS, hidden)
        self.drop, self.ln_f = nn.Dropout(0.1), nn.LayerNorm(hidden)
        self.h = nn.ModuleList(GPT2Block(hidden, heads) for _ in range(layers))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        position_ids = torch.arange(0, input_ids.size(-1), dtype=torch.long).unsqueeze(0)
        hidden_states = self.drop(self.wte(input_ids) + self.wpe(position_ids))
        attention_mask = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * FLOAT_MIN
        for block in self.h:
            hidden_states = block(hidden_states, attention_mask)
        return self.ln_f(hidden_states)


def token_inputs(batch: int = 2, seq: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, VOCAB, (batch, seq), generator=generator), torch.ones(batch, seq, dtype=torch.long)
