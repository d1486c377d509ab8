"""SequenceModel: embeddings, n pre-norm blocks of (token mixer, MLP), final norm, linear head."""

from __future__ import annotations

import torch
from torch import nn

from emergence_bench import registry
from emergence_bench.mixers.base import MixerContext
from emergence_bench.mixers.init import WeightInit


class Block(nn.Module):
    """x [B, L, D] -> x + mixer(norm(x)) -> x + mlp(norm(x))."""

    def __init__(self, mixer: nn.Module, d_model: int, mlp_ratio: int) -> None:
        super().__init__()
        self.norm_mixer = nn.LayerNorm(d_model)
        self.mixer = mixer
        self.norm_mlp = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, mlp_ratio * d_model), nn.GELU(), nn.Linear(mlp_ratio * d_model, d_model)
        )

    def forward(self, x: torch.Tensor, ctx: MixerContext) -> torch.Tensor:
        x = x + self.mixer(self.norm_mixer(x), ctx)
        return x + self.mlp(self.norm_mlp(x))


class SequenceModel(nn.Module):
    """Next-token model: tokens [B, L] -> logits [B, L, vocab_size], with L ≤ max_len.

    ``mixer`` is a resolved mixer config ``{name, **hparams}``; each layer gets its own instance.
    ``init`` is the named weight init (``emergence_bench.mixers.init``): the model applies it to what it owns
    (embeddings, norms, MLPs, head) and hands it to each mixer's ``init_weights`` when it has one;
    it never touches a mixer's parameters itself, so a plugin's own init survives.
    """

    def __init__(self, vocab_size: int, max_len: int, mixer: dict, d_model: int = 64,
                 n_layers: int = 1, mlp_ratio: int = 4, init: WeightInit | None = None) -> None:
        super().__init__()
        self.init = init if init is not None else WeightInit()
        mixer_cls = registry.mixers.get(mixer["name"])
        hparams = {k: v for k, v in mixer.items() if k != "name"}
        self.max_len = max_len
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(
            Block(mixer_cls(d_model=d_model, max_len=max_len, layer_idx=i, **hparams), d_model, mlp_ratio)
            for i in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        owned: list[nn.Module] = [self.token_embedding, self.position_embedding, self.norm, self.head]
        for block in self.layers:
            owned += [block.norm_mixer, block.norm_mlp, block.mlp]
            init_weights = getattr(block.mixer, "init_weights", None)
            if callable(init_weights):
                init_weights(self.init)
        for module in owned:
            self.init.apply_(module)

    def set_vocab(self, vocab_size: int, mode: str = "reinit") -> None:
        """Give the embeddings and head ``vocab_size`` tokens (a curriculum's next task): fresh
        weights (``reinit``), or fresh weights with the rows both vocabularies share copied (``resize``)."""
        old_embedding, old_head = self.token_embedding, self.head
        d_model = old_embedding.embedding_dim
        self.token_embedding = nn.Embedding(vocab_size, d_model).to(old_embedding.weight.device)
        self.head = nn.Linear(d_model, vocab_size).to(old_head.weight.device)
        self.init.apply_(self.token_embedding)
        self.init.apply_(self.head)
        if mode == "resize":
            shared = min(vocab_size, old_embedding.num_embeddings)
            with torch.no_grad():
                self.token_embedding.weight[:shared] = old_embedding.weight[:shared]
                self.head.weight[:shared] = old_head.weight[:shared]
                self.head.bias[:shared] = old_head.bias[:shared]

    @property
    def layers(self) -> list[Block]:
        """The blocks in order (an nn.ModuleList yields them typed as plain Modules)."""
        return [block for block in self.blocks if isinstance(block, Block)]

    @property
    def mixers(self) -> list[nn.Module]:
        return [block.mixer for block in self.layers]

    def state_size(self, length: int) -> int | None:
        """The inference state of all layers' mixers after ``length`` tokens, per sequence (see
        ``TokenMixer.state_size``); None when any layer's mixer does not state its own."""
        if not (isinstance(length, int) and length >= 0):
            raise ValueError(f"length must be an integer ≥ 0, got {length!r}")
        sizes = [getattr(mixer, "state_size", lambda _: None)(length) for mixer in self.mixers]
        known = [size for size in sizes if size is not None]
        return sum(known) if len(known) == len(sizes) else None

    def forward(self, tokens: torch.Tensor, ctx: MixerContext | None = None) -> torch.Tensor:
        ctx = ctx if ctx is not None else MixerContext()
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x, ctx)
        return self.head(self.norm(x))
