"""Sampling parameters (llama-cpp-python / OpenAI names) turned into a llama.cpp sampler chain."""

from __future__ import annotations

from dataclasses import dataclass, field

from llamacore._core import Model, Sampler


@dataclass
class SamplingParams:
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_last_n: int = 64
    mirostat_mode: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    # llama-server's samplers beyond OpenAI's (their names and defaults; 0 or -1 is off)
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 64
    dry_sequence_breakers: tuple[str, ...] = ("\n", ":", "\"", "*")
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    top_n_sigma: float = -1.0
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    min_keep: int = 0
    # llama-server's `samplers`: the truncating stages and their order (None: its default order, each
    # stage only when its parameter turns it on); names as llama.cpp's (SAMPLER_NAMES)
    samplers: tuple[str, ...] | None = None
    seed: int | None = None
    logit_bias: dict[int, float] = field(default_factory=dict)
    grammar: str | None = None
    # a lazy grammar (llama.cpp's tool-call grammars): free until a pattern matches or a token is sampled
    grammar_patterns: tuple[str, ...] = ()
    grammar_tokens: tuple[int, ...] = ()
    # tokens the grammar takes before sampling: a chat grammar begins with the prompt's generation prompt
    grammar_prefill: tuple[int, ...] = ()

    def validate(self) -> None:
        """Reject values llama.cpp would misbehave on, with the parameter's name."""
        checks = [
            ("temperature", self.temperature >= 0),
            ("top_p", 0.0 <= self.top_p <= 1.0),
            ("min_p", 0.0 <= self.min_p <= 1.0),
            ("typical_p", 0.0 < self.typical_p <= 1.0),
            ("repeat_penalty", self.repeat_penalty > 0),
            ("presence_penalty", -2.0 <= self.presence_penalty <= 2.0),
            ("frequency_penalty", -2.0 <= self.frequency_penalty <= 2.0),
            ("mirostat_mode", self.mirostat_mode in (0, 1, 2)),
            ("dry_multiplier", self.dry_multiplier >= 0), ("dry_base", self.dry_base >= 1),
            ("dry_allowed_length", self.dry_allowed_length >= 0), ("dry_penalty_last_n", self.dry_penalty_last_n >= 0),
            ("xtc_probability", 0.0 <= self.xtc_probability <= 1.0), ("xtc_threshold", 0.0 <= self.xtc_threshold),
            ("dynatemp_range", self.dynatemp_range >= 0), ("dynatemp_exponent", self.dynatemp_exponent > 0),
            ("min_keep", self.min_keep >= 0),
        ]
        for name, ok in checks:
            if not ok:
                raise ValueError(f"invalid {name}: {getattr(self, name)!r}")

    def build(self, model: Model) -> Sampler:
        """The chain in llama.cpp's usual order; temperature 0 means greedy."""
        self.validate()
        chain = Sampler()
        if self.logit_bias:
            chain.logit_bias(model, self.logit_bias)
        if self.grammar:
            chain.grammar(model, self.grammar, trigger_patterns=self.grammar_patterns or None,
                          trigger_tokens=self.grammar_tokens or None, prefill=self.grammar_prefill or None)
        keep = max(self.min_keep, 1)
        if self.samplers is not None and self.mirostat_mode == 0:     # mirostat ignores the list, as llama.cpp
            return self._in_order(chain, model, keep)
        if self.repeat_penalty != 1.0 or self.presence_penalty or self.frequency_penalty:
            chain.penalties(self.penalty_last_n, self.repeat_penalty, self.frequency_penalty,
                            self.presence_penalty)
        if self.dry_multiplier > 0:
            chain.dry(model, self.dry_multiplier, self.dry_base, self.dry_allowed_length, self.dry_penalty_last_n,
                      self.dry_sequence_breakers)
        if self.temperature == 0:
            return chain.greedy()
        if self.mirostat_mode == 1:
            return chain.temp(self.temperature).mirostat(model.n_vocab, self.seed, self.mirostat_tau,
                                                         self.mirostat_eta)
        if self.mirostat_mode == 2:
            return chain.temp(self.temperature).mirostat_v2(self.seed, self.mirostat_tau, self.mirostat_eta)
        # llama-server's default order: top_n_sigma, top_k, typical, top_p, min_p, xtc, temperature
        if self.top_n_sigma > 0:
            chain.top_n_sigma(self.top_n_sigma)
        if self.top_k > 0:
            chain.top_k(min(self.top_k, model.n_vocab))   # k >= n_vocab keeps every token anyway
        if self.typical_p < 1.0:
            chain.typical(self.typical_p, keep)
        if self.top_p < 1.0:
            chain.top_p(self.top_p, keep)
        if self.min_p > 0.0:
            chain.min_p(self.min_p, keep)
        if self.xtc_probability > 0:
            chain.xtc(self.xtc_probability, self.xtc_threshold, keep, self.seed)
        if self.dynatemp_range > 0:
            chain.temp_ext(self.temperature, self.dynatemp_range, self.dynatemp_exponent)
        else:
            chain.temp(self.temperature)
        return chain.dist(self.seed)


    def _in_order(self, chain: Sampler, model: Model, keep: int) -> Sampler:
        """The stages `samplers` lists, in its order, as llama.cpp's common sampler adds them (each
        unconditionally: a stage whose parameter is off leaves the candidates as they are)."""
        stages = {
            "penalties": lambda: chain.penalties(self.penalty_last_n, self.repeat_penalty, self.frequency_penalty,
                                                 self.presence_penalty),
            "dry": lambda: chain.dry(model, self.dry_multiplier, self.dry_base, self.dry_allowed_length,
                                     self.dry_penalty_last_n, self.dry_sequence_breakers),
            "top_n_sigma": lambda: chain.top_n_sigma(self.top_n_sigma),
            "top_k": lambda: chain.top_k(min(self.top_k, model.n_vocab)),
            "typ_p": lambda: chain.typical(self.typical_p, keep),
            "top_p": lambda: chain.top_p(self.top_p, keep),
            "min_p": lambda: chain.min_p(self.min_p, keep),
            "xtc": lambda: chain.xtc(self.xtc_probability, self.xtc_threshold, keep, self.seed),
            "temperature": lambda: chain.temp_ext(self.temperature, self.dynatemp_range, self.dynatemp_exponent),
        }
        for name in self.samplers or ():
            if name in stages:
                stages[name]()
        return chain.dist(self.seed)


# llama.cpp's sampler names, with its other spellings and one-letter codes (common/sampling.cpp)
SAMPLER_NAMES = {
    "penalties": "penalties", "e": "penalties", "dry": "dry", "d": "dry",
    "top_n_sigma": "top_n_sigma", "s": "top_n_sigma", "top_k": "top_k", "k": "top_k",
    "typ_p": "typ_p", "typical_p": "typ_p", "typical": "typ_p", "y": "typ_p",
    "top_p": "top_p", "p": "top_p", "nucleus": "top_p", "min_p": "min_p", "m": "min_p",
    "xtc": "xtc", "x": "xtc", "temperature": "temperature", "temp": "temperature", "t": "temperature",
}


def sampler_order(value: str | list[str]) -> tuple[str, ...]:
    """llama-server's `samplers` (a list of names, or a string of one-letter codes) as canonical names;
    ValueError naming one it does not know, or one this server has not (infill, adaptive_p)."""
    names = list(value) if isinstance(value, str) else value
    out = []
    for name in names:
        canonical = SAMPLER_NAMES.get(str(name).lower().strip())
        if canonical is None:
            raise ValueError(f"samplers: unknown or unsupported sampler {name!r} "
                             f"(known: {', '.join(sorted(set(SAMPLER_NAMES.values())))})")
        out.append(canonical)
    return tuple(out)


def check_tfs_z(tfs_z: float) -> None:
    """llama-cpp-python's tail-free sampling: llama.cpp no longer has that sampler, so only 1.0 (off)."""
    if tfs_z != 1.0:
        raise ValueError(f"tfs_z={tfs_z}: tail-free sampling was removed from llama.cpp; only 1.0 (off) is accepted")
