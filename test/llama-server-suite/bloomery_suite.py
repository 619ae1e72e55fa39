"""pytest plugin that runs llama.cpp's server test suite against bloomery-serve (see README.md).

It changes one thing in the suite: which model file each of its server presets names. llama.cpp's presets download
llama.cpp's test models from the Hugging Face hub (`--hf-repo ggml-org/...`); here each preset runs on a model of
bloomery's (`--model <file>`), with every other flag of the preset and of the test unchanged. Then it marks the
tests listed in expected.py: a test whose only llama.cpp-specific expectation is the text its model writes runs
with that text match relaxed to "the server answered text", every other assertion as
written, and is reported as xfail naming the text it expected. The tests listed in expected.py's SKIPPED are skipped
with their reason (what bloomery-serve refuses by name, or an expectation only llama.cpp's test models meet).
"""
import json
import os

import pytest

import utils
from expected import SKIPPED, TEXT_OF_LLAMA_CPP_MODELS, VOCABULARY_COUNTS, WRITES_ON

MODELS = json.loads(os.environ["BLOOMERY_SUITE_MODELS"])

# The suite's presets and the model each runs on. stories260K and stories15M-MoE write TinyStories; bloomery's
# default model (a trained MoE that writes English) stands for them. The infill preset needs fill-in-the-middle
# tokens: a synthetic MoE with Qwen2.5-Coder's. The embedding preset (BERT bge-small) runs a synthetic
# Qwen3-Embedding-like model (last-token pooling, EOS added to each input), the reranking one (jina-reranker) a
# synthetic Qwen3-Reranker-like model (a cls.output head, rank pooling, a rerank template). The vision preset runs
# the default model: bloomery-serve refuses images by name. The tests of expected.py's WRITES_ON, which need a model
# that writes until n_predict, run on tiny-qwen3moe-8k (random weights, 8192 tokens of which one ends a text) in
# place of the default model.
PRESET_MODELS = {
    "tinyllama2": "default",
    "stories15m_moe": "default",
    "tinyllama_infill": "infill",
    "bert_bge_small": "embedding",
    "bert_bge_small_with_fa": "embedding",
    "jina_reranker_tiny": "reranker",
    "tinygemma3": "default",
}

# The model that stands for the default one in the tests of expected.py's WRITES_ON (set while such a test runs).
_default_stand_in = None

# Files the suite downloads besides its presets' models: the speculative tests' draft model.
DOWNLOADS = {
    "https://huggingface.co/ggml-org/tiny-llamas/resolve/main/stories15M-q4_0.gguf": "default",
}


def _on_our_model(make, model):
    def make_server():
        server = make()
        server.model_hf_repo = None
        server.model_hf_file = None
        server.model_file = MODELS[_default_stand_in if model == "default" and _default_stand_in else model]
        return server

    return staticmethod(make_server)


def _download(original):
    def download_file(url, output_file_path=None):
        if url in DOWNLOADS:
            return MODELS[DOWNLOADS[url]]
        return original(url, output_file_path)

    return download_file


def pytest_configure(config):
    for name, model in PRESET_MODELS.items():
        setattr(utils.ServerPreset, name, _on_our_model(getattr(utils.ServerPreset, name), model))
    # load_all() starts every preset once to download its model; bloomery's are local files.
    utils.ServerPreset.load_all = staticmethod(lambda: None)
    config.addinivalue_line("markers", "bloomery_text: the text llama.cpp's model writes (expected.py)")
    config.addinivalue_line("markers", "bloomery_counts: token counts of llama.cpp's vocabulary (expected.py)")


def _listed(table, nodeid):
    for key, reason in table.items():
        if nodeid == key or (key.endswith("*") and nodeid.startswith(key[:-1])):
            return reason
    return None


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        module = item.module
        if hasattr(module, "download_file") and not getattr(module.download_file, "_bloomery", False):
            module.download_file = _download(module.download_file)
            module.download_file._bloomery = True
        reason = _listed(SKIPPED, item.nodeid)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
            continue
        text = _listed(TEXT_OF_LLAMA_CPP_MODELS, item.nodeid)
        counts = _listed(VOCABULARY_COUNTS, item.nodeid)
        if counts is not None:
            item.add_marker(pytest.mark.bloomery_counts(*counts))
            text = text or "TinyStories text"
        if text is not None:
            item.add_marker(pytest.mark.bloomery_text(text))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    # The suite's fixtures make each test's server: they run inside this hook.
    global _default_stand_in
    writes_on = _listed({key: True for key in WRITES_ON}, item.nodeid) or _listed(VOCABULARY_COUNTS, item.nodeid)
    _default_stand_in = "writes_on" if writes_on else None
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    global _default_stand_in
    yield
    _default_stand_in = None


class TokenCount:
    """A token count of llama.cpp's test vocabulary, as a test's parameter: equal to any count the server reports (a
    non-negative integer), each comparison noted, so the structure is checked and the count is reported."""

    def __init__(self, name, expected, notes):
        self.name, self.expected, self.notes = name, expected, notes

    def __eq__(self, other):
        if other != self.expected:
            self.notes.append(f"{self.name} {self.expected} (ours {other!r})")
        return isinstance(other, int) and not isinstance(other, bool) and other >= 0

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = None

    def __repr__(self):
        return f"<{self.name}: a token count; llama.cpp's vocabulary gives {self.expected}>"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    counts = item.get_closest_marker("bloomery_counts")
    if counts is not None:
        notes = item._bloomery_count_notes = []
        for name in counts.args:
            item.funcargs[name] = TokenCount(name, item.funcargs[name], notes)
    marker = item.get_closest_marker("bloomery_text")
    if marker is None:
        yield
        return
    module = item.module
    strict = module.match_regex
    misses = []

    def text_matches(regex, text):
        # The structure still holds: the server answered with text where the test reads it.
        assert isinstance(text, str), f"expected text, got {text!r}"
        if not strict(regex, text):
            misses.append(f"{regex!r} in {text!r}")
        return True

    module.match_regex = text_matches
    try:
        yield
    finally:
        module.match_regex = strict
    item._bloomery_text_misses = misses


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    misses = getattr(item, "_bloomery_text_misses", None)
    counts = getattr(item, "_bloomery_count_notes", None)
    if report.when == "call" and report.passed and (misses or counts):
        reasons = []
        if counts:
            reasons.append(f"token counts of llama.cpp's vocabulary: {', '.join(dict.fromkeys(counts))}")
        if misses:
            reasons.append(f"{item.get_closest_marker('bloomery_text').args[0]}, text expected: {misses[0]}")
        report.outcome = "skipped"
        report.wasxfail = f"{'; '.join(reasons)}; every other assertion passed"
