"""The pydantic model the client flows extract: every field bounded, so a grammar-constrained
answer of the random tiny model ends well within the token limit."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

MAX_TOKENS = 300      # the longest City takes about 60 tokens of the tiny model


class City(BaseModel):
    """A city."""

    name: str = Field(max_length=12)
    population: int = Field(ge=0, le=1000)
    capital: bool
    size: Literal["small", "large"]
