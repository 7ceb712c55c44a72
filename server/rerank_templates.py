"""Rerank templates: how a query and a document become a scoring request for an LLM reranker.

A template is a small JSON object: `query` (text with `{query}` and `{instruction}`: the shared
head, computed once per rerank), `document` (text with `{document}`: each document's own part),
`yes` and `no` (the label texts, one token each: relevance is the "yes" share of the softmax over
[no, yes] at the last position) and `instruction` (its default). Two are built in; a file gives any
other. Pure: no tokenizer here beyond the `tokenize` passed to `label_ids()`.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
_JUDGE = ('Judge whether the Document meets the requirements based on the Query and the Instruct '
          'provided. Note that the answer can only be "yes" or "no".')
QWEN3_RERANKER = "qwen3-reranker"
YES_NO = "yes-no"
FIELDS = ("query", "document", "yes", "no", "instruction")


@dataclass(frozen=True)
class RerankTemplate:
    name: str          # a built-in's name, or the file it was read from
    query: str         # with {query} and {instruction}
    document: str      # with {document}
    yes: str
    no: str
    instruction: str   # used when a request names none

    def fill_query(self, query: str, instruction: str | None = None) -> str:
        return fill(self.query, {"query": query,
                                 "instruction": self.instruction if instruction is None else instruction})

    def fill_document(self, document: str) -> str:
        return fill(self.document, {"document": document})

    def to_dict(self) -> dict:
        """For /get_server_info: the effective template, word for word."""
        return asdict(self)


def fill(text: str, values: dict[str, str]) -> str:
    """Each {name} of `values` replaced in one pass: not str.format (the template's other braces
    stay), nor one replace after another (a query holding "{instruction}" stays as sent)."""
    pattern = "|".join(re.escape("{" + name + "}") for name in values)
    return re.sub(pattern, lambda match: values[match.group(0)[1:-1]], text)


BUILTINS = {
    # Qwen3-Reranker's published prompt (its model card; vLLM's and SGLang's examples): ChatML with
    # an empty think block, then P("yes") against P("no") at the assistant's first token.
    QWEN3_RERANKER: RerankTemplate(
        name=QWEN3_RERANKER,
        query=f"<|im_start|>system\n{_JUDGE}<|im_end|>\n<|im_start|>user\n"
              "<Instruct>: {instruction}\n<Query>: {query}\n",
        document="<Document>: {document}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
        yes="yes", no="no", instruction=DEFAULT_INSTRUCTION),
    # Any other chat or base model: the same judgement in plain text (no model's chat markup), the
    # answer read after "Answer:", so the labels carry their leading space.
    YES_NO: RerankTemplate(
        name=YES_NO,
        query=f"{_JUDGE}\n<Instruct>: {{instruction}}\n<Query>: {{query}}\n",
        document="<Document>: {document}\nAnswer:",
        yes=" yes", no=" no", instruction=DEFAULT_INSTRUCTION),
}


def parse_template(data, name: str) -> RerankTemplate:
    """A template from its JSON object; ValueError naming the field that is wrong."""
    if not isinstance(data, dict):
        raise ValueError(f"rerank template {name}: must be a JSON object with {', '.join(FIELDS)}")
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise ValueError(f"rerank template {name}: unknown fields {unknown} (known: {', '.join(FIELDS)})")
    data = {"instruction": DEFAULT_INSTRUCTION, **data}
    for field in FIELDS:
        if not isinstance(data.get(field), str) or (field != "instruction" and not data[field]):
            raise ValueError(f"rerank template {name}: '{field}' must be a non-empty string")
    for field, placeholder in (("query", "{query}"), ("document", "{document}")):
        if placeholder not in data[field]:
            raise ValueError(f"rerank template {name}: '{field}' must contain {placeholder}")
    return RerankTemplate(name=name, **data)


def load_template(name_or_path: str) -> RerankTemplate:
    """A built-in by name, else a JSON file; ValueError saying which and why."""
    if name_or_path in BUILTINS:
        return BUILTINS[name_or_path]
    path = Path(name_or_path)
    if not path.is_file():
        raise ValueError(f"rerank template '{name_or_path}' is neither a built-in "
                         f"({', '.join(BUILTINS)}) nor a file")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"rerank template {path}: not readable JSON: {error}") from None
    return parse_template(data, str(path))


def auto_template_name(*names: str | None) -> str:
    """qwen3-reranker for a model whose name (its path, served name, the config's name_or_path or
    architectures) says it is one; the generic yes/no template for every other model."""
    said = " ".join(name.lower().replace("_", "-") for name in names if name)
    return QWEN3_RERANKER if "qwen3-reranker" in said else YES_NO


def label_ids(template: RerankTemplate, tokenize: Callable[[str], list[int]]) -> tuple[int, int]:
    """(no id, yes id); ValueError unless each label is exactly one token and they differ."""
    ids = {}
    for field in ("no", "yes"):
        text = getattr(template, field)
        tokens = tokenize(text)
        if len(tokens) != 1:
            raise ValueError(f"rerank template {template.name}: the '{field}' label {text!r} is "
                             f"{len(tokens)} tokens {tokens} for this tokenizer; it must be one "
                             "(give a template whose labels are single tokens: --rerank-template FILE)")
        ids[field] = tokens[0]
    if ids["no"] == ids["yes"]:
        raise ValueError(f"rerank template {template.name}: 'yes' and 'no' are the same token")
    return ids["no"], ids["yes"]
