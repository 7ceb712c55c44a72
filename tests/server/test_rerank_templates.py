"""Rerank templates: the built-ins, a template from a file (and what a bad one is told), the
automatic choice, and the one-token rule for the labels."""
from __future__ import annotations

import json

import pytest

from server.rerank_templates import (
    BUILTINS,
    DEFAULT_INSTRUCTION,
    QWEN3_RERANKER,
    YES_NO,
    auto_template_name,
    label_ids,
    load_template,
    parse_template,
)

GOOD = {"query": "Q: {query} ({instruction})\n", "document": "D: {document}\nA:", "yes": " y",
        "no": " n", "instruction": "find it"}


def char_tokenize(text: str) -> list[int]:
    return [ord(ch) for ch in text]


def test_qwen3_reranker_is_its_published_prompt():
    template = BUILTINS[QWEN3_RERANKER]
    query = template.fill_query("What is the capital of China?")
    document = template.fill_document("The capital of China is Beijing.")
    assert query == ("<|im_start|>system\nJudge whether the Document meets the requirements based on the "
                     "Query and the Instruct provided. Note that the answer can only be \"yes\" or "
                     "\"no\".<|im_end|>\n<|im_start|>user\n<Instruct>: Given a web search query, retrieve "
                     "relevant passages that answer the query\n<Query>: What is the capital of China?\n")
    assert document == ("<Document>: The capital of China is Beijing.<|im_end|>\n<|im_start|>assistant\n"
                        "<think>\n\n</think>\n\n")
    assert (template.yes, template.no) == ("yes", "no")


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_builtins_are_valid_templates(name):
    template = load_template(name)
    fields = {key: value for key, value in template.to_dict().items() if key != "name"}
    assert parse_template(fields, name) == template


def test_fill_keeps_braces_of_the_texts_and_takes_an_instruction():
    template = parse_template(GOOD, "t")
    assert template.fill_query("{a} {document}", "{query}") == "Q: {a} {document} ({query})\n"
    assert template.fill_query("x") == "Q: x (find it)\n"
    assert template.fill_document("{query}") == "D: {query}\nA:"


def test_a_template_file_is_read(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({k: v for k, v in GOOD.items() if k != "instruction"}))
    template = load_template(str(path))
    assert template.name == str(path) and template.instruction == DEFAULT_INSTRUCTION
    assert template.fill_document("d") == "D: d\nA:"


@pytest.mark.parametrize("content, message", [
    ("[1]", "must be a JSON object"),
    ("{", "not readable JSON"),
    (json.dumps({**GOOD, "extra": 1}), "unknown fields ['extra']"),
    (json.dumps({**GOOD, "yes": ""}), "'yes' must be a non-empty string"),
    (json.dumps({**GOOD, "no": 3}), "'no' must be a non-empty string"),
    (json.dumps({k: v for k, v in GOOD.items() if k != "document"}), "'document' must be a non-empty"),
    (json.dumps({**GOOD, "query": "no placeholder"}), "'query' must contain {query}"),
    (json.dumps({**GOOD, "document": "none"}), "'document' must contain {document}"),
], ids=["not-object", "not-json", "unknown-field", "empty-label", "label-not-text", "missing-field",
        "query-placeholder", "document-placeholder"])
def test_a_bad_template_file_is_refused_naming_the_field(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=f"rerank template {path}") as error:
        load_template(str(path))
    assert message in str(error.value)


def test_an_unknown_name_is_neither_builtin_nor_file():
    with pytest.raises(ValueError, match="neither a built-in .*qwen3-reranker, yes-no.* nor a file"):
        load_template("no-such-template")


@pytest.mark.parametrize("names, expected", [
    (["Qwen/Qwen3-Reranker-0.6B"], QWEN3_RERANKER),
    (["/models/qwen3_reranker_4b", None], QWEN3_RERANKER),
    (["/models/local", "Qwen3-Reranker-8B", "Qwen3ForCausalLM"], QWEN3_RERANKER),
    (["default", None, "", "LlamaForCausalLM"], YES_NO),
    (["Qwen/Qwen3-0.6B", "Qwen3ForCausalLM"], YES_NO),
], ids=["hub-id", "folder", "config-name", "default-model", "qwen3-not-reranker"])
def test_the_automatic_choice_follows_the_model_names(names, expected):
    assert auto_template_name(*names) == expected


def test_labels_are_one_token_each():
    template = parse_template({**GOOD, "yes": "y", "no": "n"}, "t")
    assert label_ids(template, char_tokenize) == (ord("n"), ord("y"))


@pytest.mark.parametrize("yes, no, message", [
    (" yes", "n", r"the 'yes' label ' yes' is 4 tokens .* it must be one"),
    ("y", "", r"the 'no' label '' is 0 tokens"),
    ("y", "y", "'yes' and 'no' are the same token"),
])
def test_labels_that_are_not_one_token_are_refused(yes, no, message):
    template = parse_template({**GOOD, "yes": yes, "no": no or "x"}, "t")
    if not no:
        object.__setattr__(template, "no", "")  # a tokenizer may turn a label into nothing
    with pytest.raises(ValueError, match=message):
        label_ids(template, char_tokenize)
