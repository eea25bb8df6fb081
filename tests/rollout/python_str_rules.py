"""What Python itself says about Unicode text, for the reward rules' tests: Python's str
predicates for every code point, float() of some texts, and the scores the rules' Python
originals give, computed here with Python's own str.lower / str.split / float() / re.
Standard library only.

Usage: python3 python_str_rules.py CASES.json OUT.json
CASES.json: {"float": [text, ...], "f1": [[response, label], ...], "math": [...],
             "deepscaler": [...], "dapo": [...]}
OUT.json:   {"unicode_version", "assigned": [[first, last], ...], "space": [cp, ...],
             "decimal": [[cp, value], ...], "digit": [cp, ...], "word": [[first, last], ...],
             "lower": [[cp, text], ...] (where chr(cp).lower() differs), "float": [value or null],
             and one list of scores per rule}
"""
import collections
import json
import re
import string
import sys
import unicodedata


class Undecided(Exception):
    """A math case these few steps cannot grade without sympy: the test must not use it."""


def ranges(code_points):
    out = []
    for cp in code_points:
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


def character_tables():
    assigned, space, decimal, digit, word, lower = [], [], [], [], [], []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        if unicodedata.category(c) != "Cn":
            assigned.append(cp)
        if c.isspace():
            space.append(cp)
        if c.isdecimal():
            decimal.append([cp, int(c)])
        if c.isdigit():
            digit.append(cp)
        if re.fullmatch(r"\w", c):
            word.append(cp)
        if c.lower() != c:
            lower.append([cp, c.lower()])
    return {
        "unicode_version": unicodedata.unidata_version,
        "assigned": ranges(assigned),
        "space": space,
        "decimal": decimal,
        "digit": digit,
        "word": ranges(word),
        "lower": lower,
    }


def python_float(text):
    try:
        return float(text)
    except ValueError:
        return None


# --rm-type f1: SQuAD's answer normal form and token F1, as HotpotQA's evaluation defines them.
def squad_normal_form(text):
    text = text.lower()
    text = "".join(c for c in text if c not in string.punctuation)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def f1(response, label):
    predicted, truth = squad_normal_form(response), squad_normal_form(label)
    for special in ("yes", "no", "noanswer"):
        if special in (predicted, truth) and predicted != truth:
            return 0.0
    predicted_tokens, truth_tokens = predicted.split(), truth.split()
    common = sum((collections.Counter(predicted_tokens) & collections.Counter(truth_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted_tokens), common / len(truth_tokens)
    return 2 * precision * recall / (precision + recall)


# --rm-type math on answers that are plain numbers or short sums (no LaTeX, units, fractions or
# tuples): Hendrycks' normal form reduces to strip(), and the looser one to these steps.
def last_box(text):
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    end = text.find("}", start)
    return None if end < 0 else text[start + len("\\boxed{") : end]


def near_integer(value):
    try:
        return abs(value - int(round(value))) <= 1e-7
    except (OverflowError, ValueError):  # inf, nan
        return False


def without_thousands_separators(text):
    while True:
        stripped = re.sub(r"(\d)(,)(\d\d\d)($|\D)", r"\1\3\4", text)
        if stripped == text:
            return text
        text = stripped


def is_integer(text):
    value = python_float(without_thousands_separators(text))
    return value is not None and near_integer(value)


def loose_normal_form(text):
    value = python_float(text)
    if value is not None and near_integer(value):
        text = str(int(round(value)))
    text = re.sub("- *", "-", text)
    text = re.sub("([0-9]) +([0-9])", "\\1+\\2", text)
    text = text.replace(" ", "").lower()
    if is_integer(text):
        text = str(int(float(text.replace(",", ""))))
    return text


def grade_math(given, truth):
    if given.strip().replace(" ", "") == truth.strip().replace(" ", ""):
        return 1
    g, t = loose_normal_form(given), loose_normal_form(truth)
    if g == t:
        return 1
    if is_integer(g) or is_integer(t):
        return 0  # an integer answer must be given as one, and two integers are equal as text
    try:
        # The symbolic check parses Python syntax, so it fails on what Python cannot compile.
        compile(f"({t})-({g})", "<answer>", "eval")
    except SyntaxError:
        return 0
    raise Undecided(f"{given!r} vs {truth!r}")


def math(response, label):
    truth = last_box(label) if "\\boxed" in label else label
    given = last_box(response)
    if given is None or not truth:
        return 0
    return grade_math(given, truth)


def deepscaler(response, label):
    if "</think>" not in response:
        return 0
    return math(response.split("</think>")[-1], label)


# --rm-type dapo on numeric answers: the text after the last "Answer:", its last '=' part,
# spaces dropped, commas dropped from digit strings (str.isdigit), stripped; the label as an
# integer (int(float(...))).
def dapo_normal_form(text):
    text = text.split("=")[-1].replace(" ", "")
    if text.replace(",", "").isdigit():
        text = text.replace(",", "")
    return text.strip()


def dapo(response, label):
    found = re.findall(r"(?i)Answer\s*:\s*([^\n]+)", response[-300:])
    predicted = dapo_normal_form(found[-1] if found else "[INVALID]")
    truth = str(int(float(dapo_normal_form(label))))
    return 1.0 if predicted == truth else -1.0


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    out = character_tables()
    out["float"] = [python_float(text) for text in cases.get("float", [])]
    rules = {"f1": f1, "math": math, "deepscaler": deepscaler, "dapo": dapo}
    for name, rule in rules.items():
        out[name] = [rule(response, label) for response, label in cases.get(name, [])]
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
