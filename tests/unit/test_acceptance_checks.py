"""The acceptance stage's judgements of answers and figures."""

from __future__ import annotations

from ansible.module_utils.acceptance import checks as ac


def test_a_repetition_loop_is_measured_and_ordinary_text_is_not():
    loop = "I am a model. " * 20
    assert ac.ngram_repetition(loop) > 0.8
    prose = ("The sky is blue because molecules in the air scatter short wavelengths of sunlight "
             "more than long ones, so blue light reaches our eyes from every direction.")
    assert ac.ngram_repetition(prose) == 0.0
    assert ac.ngram_repetition("too short") == 0.0


def test_garbage_is_what_is_not_text():
    assert ac.garbage_share("Paris, the capital — 2 km² ✓\n") == 0.0
    assert ac.garbage_share("ok\ufffd\ufffd\x00\x07") > 0.5


def test_judge_answer_names_each_problem():
    assert ac.judge_answer("The capital of France is Paris.", ["paris"], 0.3, 0.02) == []
    assert ac.judge_answer("  ", ["x"], 0.3, 0.02) == ["empty answer"]
    problems = ac.judge_answer("yes yes yes yes yes yes yes yes \ufffd\ufffd", ["42"], 0.3, 0.02)
    assert problems[0].startswith("repetition loop: ") and "(at most 0.3)" in problems[0]
    assert problems[1].startswith("garbage: ")
    assert problems[2] == "does not mention '42'"


def test_verdicts_name_the_figure_the_measure_and_the_requirement():
    measured = {"single_decode_tps": 63.1, "aggregate_decode_tps": 140.0, "prefill_tps": None,
                "long_context_memory_growth_pct": 12.5}
    thresholds = {"single_decode_tps": 75, "aggregate_decode_tps": 130, "prefill_tps": 2000,
                  "max_memory_growth_pct": 10}
    assert ac.verdicts(measured, thresholds) == [
        "single-stream decode: 63.1 tokens/s measured, 75 required",
        "prefill: not measured, 2000 tokens/s required",
        "long context: memory grew 12.5 points of the node's memory during the generation, at most 10 allowed"]
    # 0 or absent: measured, not gated
    assert ac.verdicts(measured, {"single_decode_tps": 0}) == []
