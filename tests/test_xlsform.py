"""``streamanon.xlsform`` on real XLSForms (tests/data/forms/, sources in its README.md): each
field's mapping, the written file read back by the schema loader, and the errors."""

from __future__ import annotations

from pathlib import Path

import openpyxl
import pytest

from streamanon.errors import InputError
from streamanon.schema import load_schema
from streamanon.xlsform import constraint_bounds, read_xlsform, schema_from_xlsform, to_toml

FORMS = Path(__file__).resolve().parent / "data" / "forms"
FLAT = FORMS / "flat_xlsform_test.xlsx"
GROUP = FORMS / "group.xlsx"
UCL = FORMS / "UCL_Biomass_Plot_Form.xlsx"


@pytest.fixture(scope="module", autouse=True)
def _forms_are_there():
    missing = [p.name for p in (FLAT, GROUP, UCL) if not p.is_file()]
    if missing:
        pytest.fail(f"test forms missing from tests/data/forms: {missing}")


def written(schema, tmp_path: Path, name: str = "schema.toml"):
    """The schema file as anonymize reads it, and its text."""
    path = tmp_path / name
    path.write_text(to_toml(schema), encoding="utf-8")
    return load_schema(path), path.read_text(encoding="utf-8")


def test_every_field_of_the_pyxform_flat_test_form_is_mapped_by_its_type(tmp_path):
    schema = schema_from_xlsform(FLAT, qi=["everything/a_integer", "everything/autocomplete_test",
                                           "everything/group_test/select_multiple_test"])
    loaded, text = written(schema, tmp_path)
    fields = loaded.fields
    typed = {
        "skip_to_end": ("confidential", "category"),
        "everything/my_name": ("confidential", "text"),
        "everything/address": ("confidential", "text"),
        "everything/barcode_test": ("confidential", "text"),
        "everything/autocomplete_test": ("quasi_identifier", "category"),
        "everything/a_integer": ("quasi_identifier", "int"),
        "everything/a_decimal": ("confidential", "float"),
        "everything/group_test/select_multiple_test/yes": ("quasi_identifier", "bool"),
        "everything/group_test/select_multiple_test/no": ("quasi_identifier", "bool"),
        "everything/date_test": ("confidential", "timestamp"),
        "everything/datetime_test": ("confidential", "timestamp"),
        "everything/start": ("confidential", "timestamp"),
        "everything/end": ("confidential", "timestamp"),
        "everything/today": ("confidential", "timestamp"),
        "everything/time_test": ("confidential", "str"),
        "launch": ("confidential", "int"),
    }
    for name, (role, kind) in typed.items():
        assert (fields[name].role, fields[name].type) == (role, kind), name
    dropped = ["email_note", "everything/note_test", "everything/calculate_test",
               "everything/acknowledge_test", "everything/geopoint_test", "everything/image_test",
               "everything/audio_test", "everything/video_test", "everything/deviceid",
               "everything/simserial", "everything/phonenumber", "everything/uri_deviceid",
               "meta/instanceID"]
    for name in dropped:
        assert fields[name].role == "ignore" and not fields[name].required, name
    assert fields["skip_to_end"].levels == ["yes", "no"]
    assert fields["everything/compact-test"].levels == ["a", "b"]
    # a select_multiple question is its choices, not a field of its own
    assert "everything/group_test/select_multiple_test" not in fields
    # groups are paths, not fields
    assert "everything" not in fields and "everything/group_test" not in fields
    assert not loaded.names("identifier")  # none guessed
    # every field and every dropped one is explained by a comment naming its row
    assert "# everything/geopoint_test (row 34): a location" in text
    assert "# everything/note_test (row 39): a note" in text
    assert "# everything/calculate_test (row 40): a calculation" in text
    assert "# everything/image_test (row 36): a media file" in text
    # multilingual labels kept as comments
    assert "# label::english: Enter an address\n# label::chinese: 您好\n" in text
    assert any("free text" in w and "everything/my_name" in w for w in schema.warnings)


def test_required_follows_required_and_relevance():
    """list-nolabel-test is required, but inside the relevant-guarded group ``everything``."""
    flat = schema_from_xlsform(FLAT, qi=["skip_to_end"]).fields()
    assert flat["everything/labeled_select_group/list-nolabel-test"]["required"] is False
    ucl = schema_from_xlsform(UCL, qi=["location/slope"], drop_repeats=True).fields()
    assert ucl["location/slope"]["required"] is True  # required = yes, nothing relevant above
    assert ucl["info/leader_name_other"]["required"] is False  # required, but relevant on it


def test_group_paths_and_single_colon_language_labels(tmp_path):
    schema = schema_from_xlsform(GROUP, qi=["father/age"])
    loaded, text = written(schema, tmp_path)
    assert list(loaded.fields) == ["family_name", "father/phone_number", "father/age",
                                   "meta/instanceID"]
    assert (loaded.fields["father/age"].role, loaded.fields["father/age"].type) == (
        "quasi_identifier", "int")
    assert loaded.fields["father/phone_number"].type == "text"  # "phone number": free text
    assert "# label::English (en): How old is your father?" in text


def test_a_real_field_form_with_repeats_is_refused_naming_the_repeat_row():
    with pytest.raises(InputError) as caught:
        schema_from_xlsform(UCL, qi=["location/slope"])
    message = str(caught.value)
    assert "sheet survey, row 32, column type" in message and "'trees'" in message
    assert "--drop-repeats" in message and "\n" not in message


def test_dropped_repeats_are_one_ignored_list_each_and_their_questions_no_fields(tmp_path):
    schema = schema_from_xlsform(
        UCL, qi=["location/plant_phase", "location/canopy_cover", "disturbance"],
        ordinal=["location/plant_phase"], identifier=["meta/instanceID"], drop_repeats=True)
    loaded, text = written(schema, tmp_path)
    fields = loaded.fields
    for repeat in ("trees", "stumps", "subplot1", "subplot2"):
        assert fields[repeat].role == "ignore"
    assert not [n for n in fields if n.startswith(("trees/", "stumps/"))]
    phase = fields["location/plant_phase"]
    assert phase.type == "ordinal" and phase.levels == list(range(2022, 2029))
    assert fields["location/canopy_cover"].type == "int"
    assert fields["location/region_id"].type == "category"
    assert fields["location/region_id"].levels is None  # choices in a CSV file beside the form
    assert fields["location/center_point"].role == "ignore"  # geopoint
    assert fields["location/center_image"].role == "ignore"  # image
    assert fields["location/slope_radius"].role == "ignore"  # calculate
    assert fields["meta/instanceID"].role == "identifier"  # named, so an identifier
    assert [n for n in fields if n.startswith("disturbance/")] == [
        f"disturbance/{c}" for c in ("burning", "grazing", "cutting", "farming",
                                     "charcoal_making", "traps", "none")]
    assert all(fields[n].role == "quasi_identifier" and fields[n].type == "bool"
               for n in fields if n.startswith("disturbance/"))
    assert "# label::English (en): Percent Canopy Cover" in text
    assert "# label::Swahili (sw): Asilimia Plot Imefungwa na Miti" in text


def test_the_questions_read_are_those_of_the_workbook():
    title, questions = read_xlsform(GROUP)
    assert title == "group"
    assert [(q.path, q.kind, q.row) for q in questions] == [
        ("family_name", "text", 2), ("father/phone_number", "phone number", 4),
        ("father/age", "integer", 5), ("meta/instanceID", "calculate", None)]


@pytest.mark.parametrize(("constraint", "integer", "expected"), [
    (". >= 0 and . <= 120", True, (0, 120, False)),
    ("(. >= 18) and (. < 100)", True, (18, 99, False)),
    ("0 <= . and . <= 10.5", False, (0, 10.5, False)),
    (". > 0", False, (0, None, True)),
    (". > 0 and . <= ${hh_size}", True, (1, None, False)),
    (". <= ${a_integer}", True, (None, None, False)),
    (". < 5 or . > 10", True, (None, None, False)),
    ("regex(., '^[0-9]+$')", False, (None, None, False)),
])
def test_bounds_come_only_from_plain_conjunctions(constraint, integer, expected):
    assert constraint_bounds(constraint, integer=integer) == expected


def make_form(path: Path, survey: list[list], choices: list[list] | None = None) -> Path:
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "survey"
    for row in survey:
        sheet.append(row)
    if choices:
        other = book.create_sheet("choices")
        for row in choices:
            other.append(row)
    book.save(path)
    return path


YES_NO = [["list_name", "name", "label"], ["yn", "yes", "Yes"], ["yn", "no", "No"]]


def test_bounds_and_ordinals_written_from_a_constraint_and_a_range(tmp_path):
    form = make_form(tmp_path / "f.xlsx", [
        ["type", "name", "label", "constraint", "parameters"],
        ["integer", "age", "Age", ". >= 16 and . <= 99", None],
        ["decimal", "income", "Income", ". >= 0", None],
        ["range", "rating", "Rating", None, "start=1 end=5 step=1"],
        ["select_one edu", "education", "Education", None, None],
    ], [["list_name", "name", "label"], ["edu", "primary", "P"], ["edu", "secondary", "S"],
        ["edu", "tertiary", "T"]])
    fields = schema_from_xlsform(form, qi=["age", "income", "education"],
                                 ordinal=["education"]).fields()
    assert fields["age"] | {} == {"role": "quasi_identifier", "type": "int", "min": 16,
                                  "max": 99, "required": False}
    assert (fields["income"]["min"], "max" in fields["income"]) == (0.0, False)
    assert (fields["rating"]["type"], fields["rating"]["min"], fields["rating"]["max"]) == (
        "int", 1, 5)
    assert fields["education"]["type"] == "ordinal"
    assert fields["education"]["levels"] == ["primary", "secondary", "tertiary"]


@pytest.mark.parametrize(("survey", "choices", "expected"), [
    ([["type", "name"], ["integer", "age"], [None, "x"]], None,
     "sheet survey, row 3, column type: question 'x' has no type"),
    ([["type", "name"], ["integer", "age"], ["integer", None]], None,
     "sheet survey, row 3, column name: a 'integer' row needs a name"),
    ([["type", "name"], ["integr", "age"]], None,
     "sheet survey, row 2, column type: unknown question type 'integr'"),
    ([["type", "name"], ["select_one foo", "x"]], YES_NO,
     "sheet survey, row 2, column type: List name not in choices sheet: foo"),
    ([["type", "name"], ["select_one yn", "x"]], [*YES_NO, ["yn", None, "Maybe"]],
     "sheet choices, row 4, column name:"),
    ([["type", "name"], ["integer", "a b"]], None, "sheet survey, row 2, column name:"),
    ([["name", "label"], ["age", "Age"]], None, "sheet survey, row 1, column type:"),
])
def test_a_bad_workbook_gets_one_line_naming_the_sheet_row_and_column(tmp_path, survey, choices,
                                                                      expected):
    form = make_form(tmp_path / "bad.xlsx", survey, choices)
    with pytest.raises(InputError) as caught:
        schema_from_xlsform(form, qi=["age"])
    message = str(caught.value)
    assert expected in message and "\n" not in message, message
    assert message.startswith(str(form))


def test_a_file_that_is_not_a_workbook_is_one_line(tmp_path):
    bad = tmp_path / "form.xlsx"
    bad.write_text("not a workbook")
    with pytest.raises(InputError, match="not an XLSForm workbook") as caught:
        schema_from_xlsform(bad, qi=["age"])
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("options", "expected"), [
    ({"qi": ["father/agee"]}, "'father/agee' is not a field of"),
    ({"qi": ["family_name"]}, "family_name cannot be a quasi-identifier"),
    ({"qi": ["father/age"], "weight": "family_name"}, "a weight is a number"),
    ({"qi": ["father/age"], "sensitive": ["father/age"]}, "given two roles"),
    ({"qi": ["father/age"], "ordinal": ["father/age"]}, "only a select_one"),
    ({"qi": ["meta/instanceID"]}, "cannot be a quasi-identifier"),
])
def test_names_and_roles_the_form_cannot_have_are_errors(options, expected):
    with pytest.raises(InputError, match=expected):
        schema_from_xlsform(GROUP, **options)


def test_a_name_inside_a_dropped_repeat_is_an_error_saying_so():
    with pytest.raises(InputError, match="inside a repeat"):
        schema_from_xlsform(UCL, qi=["trees/tag"], drop_repeats=True)
