#!/usr/bin/env python3
"""Build the XQuAD suites: the two cross-lingual ones, xquad-zh-en (Chinese questions -> English
paragraphs) and xquad-en-zh (English questions -> Chinese paragraphs), and their Chinese
baseline xquad-zh-zh (Chinese questions -> Chinese paragraphs).

Source: github.com/google-deepmind/xquad at commit 7d30520c717524000f0d9d2f9c10a069acd9d285,
files xquad.en.json and xquad.zh.json (CC BY-SA 4.0, CC-BY-SA4.0.txt in that repository).

Usage:
  python3 make.py --repo /path/to/xquad/git-dir   # reads the files with `git show <commit>:<file>`
  python3 make.py --dir  /path/to/folder          # folder holding xquad.en.json and xquad.zh.json
  ... --direction en-zh | zh-zh                   # another suite (default zh-en)
Writes corpus.jsonl, queries.jsonl, qrels/test.tsv into the sibling folder xquad-<direction>
(or into --out).

Method (deterministic, no randomness):
  corpus  = all 240 English paragraphs of XQuAD (the whole English side; each is a SQuAD v1.1 dev
            paragraph), _id "en-<article#>-<paragraph#>", title = article title with '_' -> ' '.
  queries = every 4th XQuAD question in file order (question index 0, 4, 8, ...) -> 298 queries,
            text = the professional Chinese translation from xquad.zh.json; _id = the SQuAD question id
            (identical in every XQuAD language). metadata keeps the English original question and the
            Chinese and English answers, so an en->en upper bound can be run on the same qrels.
  qrels   = each question -> the English paragraph it was written on (score 1). Exactly one
            relevant paragraph per query; the other 239 paragraphs are the distractors
            (same 48 articles, so ~4 same-topic paragraphs per article are hard negatives).
  en-zh   = the same 298 questions the other way round: text = the English original, corpus =
            the 240 professional Chinese paragraphs of xquad.zh.json, _id "zh-<article#>-
            <paragraph#>", with no title (XQuAD's titles are the English article names in both
            files: the only English in this corpus is what the Chinese paragraphs hold).
  zh-zh   = the same 298 questions in Chinese (as zh-en) of the Chinese paragraphs (as en-zh): a
            second same-language Chinese QA suite beside CMRC 2018 (the same qrels as en-zh).
"""
import argparse, json, os, subprocess, hashlib
from typing import Any

COMMIT = "7d30520c717524000f0d9d2f9c10a069acd9d285"
SHA256 = {"xquad.en.json": "e4c57d1c9143aaa1c5d265ba5987a65f4e69528d2a98f29d6e75019b10344f29",
          "xquad.zh.json": "691d0b3359bc6b8faa8de931dfdfe21d50a65861ae348e32a0d1a0190b0c8835"}
EVERY = 4


def load(args: argparse.Namespace, name: str) -> Any:
    if args.repo:
        raw = subprocess.check_output(["git", "-C", args.repo, "show", f"{COMMIT}:{name}"])
    else:
        raw = open(os.path.join(args.dir, name), "rb").read()
    h = hashlib.sha256(raw).hexdigest()
    if h != SHA256[name]:
        raise SystemExit(f"{name}: sha256 {h} differs from the pinned source")
    return json.loads(raw)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo")
    ap.add_argument("--dir")
    ap.add_argument("--direction", choices=("zh-en", "en-zh", "zh-zh"), default="zh-en")
    ap.add_argument("--out")
    args = ap.parse_args()
    if not (args.repo or args.dir):
        ap.error("give --repo or --dir")
    out = args.out or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                   f"xquad-{args.direction}")
    en, zh = load(args, "xquad.en.json"), load(args, "xquad.zh.json")
    asked_in_zh = args.direction.startswith("zh")
    corpus_in_en = args.direction.endswith("en")
    corpus, queries, qrels = [], [], []
    qi = 0
    for ai, (da, dz) in enumerate(zip(en["data"], zh["data"])):
        assert da["title"] == dz["title"]
        for pi, (pa, pz) in enumerate(zip(da["paragraphs"], dz["paragraphs"])):
            did = f"{'en' if corpus_in_en else 'zh'}-{ai:02d}-{pi:02d}"
            corpus.append({"_id": did, "title": da["title"].replace("_", " ") if corpus_in_en else "",
                           "text": (pa if corpus_in_en else pz)["context"],
                           "metadata": {"article": da["title"]}})
            for qa, qz in zip(pa["qas"], pz["qas"]):
                assert qa["id"] == qz["id"]
                if qi % EVERY == 0:
                    asked = (qz if asked_in_zh else qa)["question"].strip()
                    other = "en_question" if asked_in_zh else "zh_question"
                    queries.append({"_id": qz["id"], "text": asked,
                                    "metadata": {other: (qa if asked_in_zh else qz)["question"].strip(),
                                                 "answers_zh": sorted({a["text"] for a in qz["answers"]}),
                                                 "answers_en": sorted({a["text"] for a in qa["answers"]})}})
                    qrels.append((qz["id"], did, 1))
                qi += 1
    os.makedirs(os.path.join(out, "qrels"), exist_ok=True)
    with open(os.path.join(out, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for c in corpus:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
    with open(os.path.join(out, "queries.jsonl"), "w", encoding="utf-8") as f:
        for q in queries:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    with open(os.path.join(out, "qrels", "test.tsv"), "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q, d, s in qrels:
            f.write(f"{q}\t{d}\t{s}\n")
    print(f"corpus {len(corpus)}  queries {len(queries)}  qrels {len(qrels)}  (of {qi} questions)")


if __name__ == "__main__":
    main()
