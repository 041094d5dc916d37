import pytest

from orchestrator.llm.edits import (
    Edit,
    EditFormatError,
    FileBlock,
    apply_edit,
    apply_edits,
    check_protected,
    find_similar_lines,
    parse_edits,
    parse_files,
)

# --------------------------------------------------------------------------
# parse_files


def test_parse_files_one_file():
    answer = "Here it is.\n\nFILE: helpers.py\n```python\ndef f():\n    return 1\n```\nDone.\n"
    assert parse_files(answer) == [FileBlock("helpers.py", "def f():\n    return 1\n")]


def test_parse_files_two_files_with_blank_line_before_fence():
    answer = (
        "FILE: generated/a.py\n\n```python\na = 1\n```\n"
        "FILE: generated/b.py\n```\nb = 2\n```\n"
    )
    assert parse_files(answer) == [
        FileBlock("generated/a.py", "a = 1\n"),
        FileBlock("generated/b.py", "b = 2\n"),
    ]


def test_parse_files_four_backtick_fence_keeps_inner_fences():
    readme = "# Usage\n```bash\npython train.py\n```\n"
    answer = f"FILE: README.md\n````markdown\n{readme}````\n"
    assert parse_files(answer) == [FileBlock("README.md", readme)]


def test_parse_files_fence_without_file_line_is_an_error():
    with pytest.raises(EditFormatError) as error:
        parse_files("Here is the code:\n```python\nx = 1\n```\n")
    message = str(error.value)
    assert "Line 2" in message and "FILE:" in message and "FILE: path/to/file.py" in message


def test_parse_files_unclosed_fence_is_an_error():
    with pytest.raises(EditFormatError, match=r"Line 2: .*helpers\.py is never closed"):
        parse_files("FILE: helpers.py\n```python\nx = 1\n")


def test_parse_files_no_block_is_an_error():
    with pytest.raises(EditFormatError, match="No file was found"):
        parse_files("I could not do it.")


def test_parse_files_rejects_a_path_outside_the_project():
    with pytest.raises(EditFormatError, match="Line 1: .*relative path"):
        parse_files("FILE: ../secrets.py\n```\nx = 1\n```\n")


# --------------------------------------------------------------------------
# parse_edits

BLOCK = "FILE: train.py\n<<<<<<< SEARCH\nlr = 1e-3\n=======\nlr = 1e-4\n>>>>>>> REPLACE\n"


def test_parse_edits_single_block():
    assert parse_edits(BLOCK) == [Edit("train.py", "lr = 1e-3\n", "lr = 1e-4\n")]


def test_parse_edits_several_blocks_several_files():
    answer = (
        "FILE: train.py\n"
        "<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n\n"
        "<<<<<<< SEARCH\nc\n=======\nd\n>>>>>>> REPLACE\n"
        "FILE: generated/helpers.py\n"
        "<<<<<<< SEARCH\n=======\nnew\n>>>>>>> REPLACE\n"
    )
    assert parse_edits(answer) == [
        Edit("train.py", "a\n", "b\n"),
        Edit("train.py", "c\n", "d\n"),
        Edit("generated/helpers.py", "", "new\n"),
    ]


def test_parse_edits_fenced_blocks():
    answer = f"Fix:\n\n```python\n{BLOCK}```\n"
    assert parse_edits(answer) == [Edit("train.py", "lr = 1e-3\n", "lr = 1e-4\n")]


def test_parse_edits_missing_divider_names_the_line():
    answer = "FILE: train.py\n<<<<<<< SEARCH\nlr = 1e-3\nlr = 1e-4\n>>>>>>> REPLACE\n"
    with pytest.raises(EditFormatError, match=r"Line 5: .*before the `=======` line.*line 2"):
        parse_edits(answer)


def test_parse_edits_missing_replace_marker_names_the_line():
    answer = "FILE: train.py\n<<<<<<< SEARCH\na\n=======\nb\n"
    with pytest.raises(EditFormatError, match=r"Line 2: .*never closed with `>>>>>>> REPLACE`"):
        parse_edits(answer)


def test_parse_edits_block_without_file_line_is_an_error():
    with pytest.raises(EditFormatError, match=r"Line 1: .*no `FILE: path` line"):
        parse_edits("<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n")


def test_parse_edits_no_blocks_is_an_error():
    with pytest.raises(EditFormatError, match="No SEARCH/REPLACE block") as error:
        parse_edits("FILE: train.py\n```python\nlr = 1e-4\n```\n")
    assert "<<<<<<< SEARCH" in str(error.value)


# --------------------------------------------------------------------------
# apply_edit

CODE = "def step(x):\n    y = x + 1\n    return y\n"


def test_apply_edit_exact():
    edit = Edit("m.py", "    y = x + 1\n", "    y = x + 2\n")
    assert apply_edit(CODE, edit) == "def step(x):\n    y = x + 2\n    return y\n"


def test_apply_edit_ignores_trailing_whitespace():
    content = "a = 1   \nb = 2\t\n"
    assert apply_edit(content, Edit("m.py", "a = 1\nb = 2\n", "a = 3\n")) == "a = 3\n"


def test_apply_edit_reindents_replacement_by_the_same_offset():
    content = "class A:\n    def f(self):\n        if x:\n            return 1\n"
    edit = Edit("m.py", "if x:\n    return 1\n", "if x:\n    return 2\nreturn 0\n")
    assert apply_edit(content, edit) == (
        "class A:\n    def f(self):\n        if x:\n            return 2\n        return 0\n"
    )


def test_apply_edit_reindents_when_search_is_deeper_than_the_file():
    edit = Edit("m.py", "        y = x + 1\n", "        y = x + 2\n")
    assert apply_edit(CODE, edit) == "def step(x):\n    y = x + 2\n    return y\n"


def test_apply_edit_drops_stray_blank_line():
    edit = Edit("m.py", "\ndef step(x):\n", "\ndef step(x, k):\n")
    assert apply_edit(CODE, edit) == "def step(x, k):\n    y = x + 1\n    return y\n"


def test_apply_edit_not_found_returns_none():
    assert apply_edit(CODE, Edit("m.py", "    z = 3\n", "    z = 4\n")) is None


def test_apply_edit_ambiguous_returns_none():
    content = "x = 0\nx = 0\n"
    assert apply_edit(content, Edit("m.py", "x = 0\n", "x = 1\n")) is None


def test_apply_edit_keeps_missing_final_newline():
    assert apply_edit("a\nb", Edit("m.py", "b\n", "c\n")) == "a\nc"


def test_apply_edit_keeps_crlf_line_endings():
    assert apply_edit("a\r\nb\r\n", Edit("m.py", "a\n", "z\n")) == "z\r\nb\r\n"


def test_apply_edit_empty_search_appends():
    assert apply_edit("a = 1", Edit("m.py", "", "b = 2\n")) == "a = 1\nb = 2\n"


# --------------------------------------------------------------------------
# find_similar_lines


def test_find_similar_lines_returns_closest_chunk_with_context():
    content = "".join(f"line {n}\n" for n in range(20)) + "    total = alpha + beta\n"
    similar = find_similar_lines("total = alpha + gamma\n", content, context=2)
    assert similar == "line 18\nline 19\n    total = alpha + beta\n"


# --------------------------------------------------------------------------
# apply_edits


def test_apply_edits_all_apply():
    edits = [
        Edit("train.py", "lr = 1e-3\n", "lr = 1e-4\n"),
        Edit("helpers.py", "def f():\n", "def g():\n"),
    ]
    result = apply_edits(edits, {"train.py": "lr = 1e-3\n", "helpers.py": "def f():\n    pass\n"})
    assert result.error is None
    assert result.new_contents == {"train.py": "lr = 1e-4\n", "helpers.py": "def g():\n    pass\n"}


def test_apply_edits_one_failure_applies_nothing_and_explains():
    edits = [
        Edit("train.py", "lr = 1e-3\n", "lr = 1e-4\n"),
        Edit("train.py", "    loss = compute_los(batch)\n", "    loss = compute(batch)\n"),
    ]
    content = "lr = 1e-3\n\ndef step(batch):\n    loss = compute_loss(batch)\n    return loss\n"
    result = apply_edits(edits, {"train.py": content})
    assert result.new_contents == {}
    assert result.failed == [edits[1]] and result.applied == [edits[0]]
    header = "SearchReplaceNoExactMatch: this SEARCH block failed to exactly match lines in train.py"
    assert header in result.error
    assert "Did you mean to match these actual lines from train.py?" in result.error
    assert "    loss = compute_loss(batch)\n" in result.error
    assert "No block was applied; send all blocks again" in result.error


def test_apply_edits_ambiguous_match_asks_for_more_context():
    result = apply_edits([Edit("m.py", "x = 0\n", "x = 1\n")], {"m.py": "x = 0\ny\nx = 0\n"})
    assert result.new_contents == {}
    assert "matches 2 places in m.py (starting at lines 1, 3)" in result.error


def test_apply_edits_empty_search_creates_file():
    result = apply_edits([Edit("generated/new.py", "", "x = 1\n")], {"generated/new.py": None})
    assert result.new_contents == {"generated/new.py": "x = 1\n"}


def test_apply_edits_search_in_missing_file_fails():
    result = apply_edits([Edit("nope.py", "x = 1\n", "x = 2\n")], {})
    assert "nope.py does not exist" in result.error


def test_apply_edits_later_blocks_see_earlier_edits():
    edits = [Edit("m.py", "a = 1\n", "a = 2\n"), Edit("m.py", "a = 2\n", "a = 3\n")]
    assert apply_edits(edits, {"m.py": "a = 1\n"}).new_contents == {"m.py": "a = 3\n"}


# --------------------------------------------------------------------------
# check_protected


def test_check_protected_catches_protected_names_however_written():
    paths = ["env_move.py", "generated/env_move.py", "./generated/grpo_template.py", "helpers.py"]
    assert check_protected(paths, ["env_move.py", "grpo_template.py"]) == paths[:3]


def test_check_protected_lets_other_files_through():
    assert check_protected(["helpers.py"], ["env_move.py", "grpo_template.py"]) == []


def test_an_empty_search_on_a_file_with_content_is_refused_as_a_regeneration():
    whole = "import os\n\nx = 1\n"
    result = apply_edits([Edit("train.py", "", whole + whole)], {"train.py": whole})
    assert result.new_contents == {} and "would regenerate it, which is not allowed" in result.error
    created = apply_edits([Edit("notes.md", "", "hello\n")], {})
    assert created.error is None and created.new_contents == {"notes.md": "hello\n"}


def test_every_format_error_of_an_answer_is_named_at_once():
    answer = ("FILE: train.py\n<<<<<<< SEARCH\nx = 1\n>>>>>>> REPLACE\n\n"
              "FILE: helpers.py\n<<<<<<< SEARCH\ny = 1\n=======\ny = 2\n>>>>>>> REPLACE\n"
              "=======\n")
    with pytest.raises(EditFormatError) as error:
        parse_edits(answer)
    message = str(error.value)
    assert message.startswith("2 format error(s) in the answer:")
    assert "Line 4: `>>>>>>> REPLACE` comes before the `=======` line of the SEARCH block opened at line 2." in message
    assert "Line 12: `=======` appears outside a SEARCH/REPLACE block." in message


# --------------------------------------------------------------------------
# unified diffs, edits that reformat, summarised files, GENERIC put back

FILE = "".join(f"value_{i} = {i}\n" for i in range(1, 31))


def diff_answer(*hunks: str) -> str:
    return "```diff\n--- a/train.py\n+++ b/train.py\n" + "".join(hunks) + "```\n"


def test_a_unified_diff_is_an_edit_placed_as_patch_places_it_its_line_numbers_2_off():
    answer = diff_answer("@@ -12,3 +12,3 @@\n value_10 = 10\n-value_11 = 11\n+value_11 = 110\n value_12 = 12\n",
                         "@@ -22,2 +22,3 @@\n value_20 = 20\n+added = 1\n value_21 = 21\n")
    result = apply_edits(parse_edits(answer), {"train.py": FILE})

    assert result.error is None
    assert result.new_contents["train.py"] == FILE.replace("value_11 = 11\n", "value_11 = 110\n").replace(
        "value_20 = 20\n", "value_20 = 20\nadded = 1\n")


def test_a_hunk_whose_context_drifted_is_placed_with_fuzz_and_one_that_fits_two_places_equally_is_refused():
    drifted = diff_answer("@@ -9,4 +9,4 @@\n value_9 = 9\n-value_10 = 10\n+value_10 = 100\n value_11 = 11\n"
                          " value_12 = 999\n")  # its last context line is not in the file any more
    assert apply_edits(parse_edits(drifted), {"train.py": FILE}).new_contents["train.py"] == \
        FILE.replace("value_10 = 10\n", "value_10 = 100\n")

    twice = "a = 1\nb = 2\na = 1\n"
    ambiguous = "--- a/x.py\n+++ b/x.py\n@@ -2,1 +2,1 @@\n-a = 1\n+a = 3\n"
    result = apply_edits(parse_edits(ambiguous), {"x.py": twice})
    assert result.error and "## HunkAmbiguous: the hunk of x.py at line 2 matches 2 places equally near line 2 " \
                            "(starting at lines 1, 3)" in result.error


def test_a_diff_that_creates_a_file_or_names_no_file_is_read_as_it_says():
    created = parse_edits("--- /dev/null\n+++ b/notes.py\n@@ -0,0 +1,2 @@\n+a = 1\n+b = 2\n")
    assert created == [Edit("notes.py", "", "a = 1\nb = 2\n")]
    with pytest.raises(EditFormatError, match=r"No SEARCH/REPLACE block was found"):
        parse_edits("@@ -1 +1 @@\n-a\n+b\n")  # no file named: not a diff, not an edit
    named = parse_edits("FILE: train.py\n```diff\n@@ -3,2 +3,2 @@\n-value_3 = 3\n+value_3 = 33\n value_4 = 4\n```\n")
    assert apply_edits(named, {"train.py": FILE}).new_contents["train.py"] == FILE.replace("= 3\n", "= 33\n", 1)


def test_lines_an_edit_changed_only_in_form_keep_their_old_text():
    old = "def f(a, b):\n    x = {'k': a}  # the key\n    return x['k'] + b\n"
    reformatted = 'def f(a,b):\n    x = {"k": a}   # the key\n    return x["k"] - b\n'
    result = apply_edits([Edit("m.py", old, reformatted)], {"m.py": old})

    # the one line that means something else is the edit's, as it wrote it
    assert result.new_contents["m.py"] == old.replace("    return x['k'] + b", '    return x["k"] - b')


def test_a_search_quoted_in_another_form_matches_the_lines_that_mean_the_same():
    text = "x = {'a': 1}\ny = 2\n"
    result = apply_edits([Edit("m.py", 'x = {"a":1}\ny = 2\n', 'x = {"a":1}\ny = 3\n')], {"m.py": text})
    assert result.new_contents["m.py"] == "x = {'a': 1}\ny = 3\n"


def test_a_search_quoted_from_a_summarised_file_matches_through_its_left_out_lines():
    text = "head = 0\n" + FILE + "tail = 1\n"
    shown = "head = 0\n...  # 30 lines not shown\ntail = 1\n"
    result = apply_edits([Edit("m.py", shown, shown.replace("tail = 1", "tail = 2"))], {"m.py": text})
    assert result.new_contents["m.py"] == text.replace("tail = 1", "tail = 2")

    invented = apply_edits([Edit("m.py", "tail = 1\n", "...  # 30 lines not shown\ntail = 1\n")], {"m.py": text})
    assert invented.new_contents == {} and "## PlaceholderInReplace: the REPLACE section for m.py holds `...  # 30 " \
                                            "lines not shown`" in invented.error


def test_generic_sections_an_edit_changed_are_put_back_from_the_template():
    from orchestrator.llm.protected import restore_generic

    template = ("# === GENERIC — DO NOT MODIFY ===\nimport os\n# === CUSTOMIZE ===\ndef f():\n    raise NotImplementedError\n"
                "# === GENERIC — DO NOT MODIFY ===\ndef main():\n    f()\n")
    train = template.replace("    raise NotImplementedError\n", "    return 1\n")
    edited = train.replace("import os", "import os, sys").replace("return 1", "return 2")

    restored, said = restore_generic(edited, template)
    assert restored == train.replace("return 1", "return 2") and said == ["the 1st GENERIC section (template line 1)"]
    assert restore_generic(train, template) == (train, [])
    unmarked = edited.replace("# === CUSTOMIZE ===\n", "")  # sections that no longer line up: left to the rules
    assert restore_generic(unmarked, template) == (unmarked, [])
