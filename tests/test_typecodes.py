"""The one table of Ignite binary type codes covers what the loader writes and the reader decodes."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from ignite_tf import typecodes as tc
from ignite_tf.etl.input import ARROW_TYPES, COLUMN_TYPES


def test_every_column_type_a_load_writes_has_a_code_the_reader_decodes():
    assert set(tc.COLUMN_CODES) == set(COLUMN_TYPES) == set(ARROW_TYPES)
    for ctype, code in tc.COLUMN_CODES.items():
        assert code in tc.SUPPORTED, ctype
        assert tc.BY_CODE[code].java, ctype  # the loader reads an existing table's types back by Java class
        if ctype != "string":
            assert tc.FIXED[code] == np.dtype(ARROW_TYPES[ctype].to_pandas_dtype()).newbyteorder("<"), ctype


def test_the_reader_decodes_every_fixed_code_and_strings_and_names_them():
    assert tc.SUPPORTED == {*tc.FIXED, tc.STRING}
    assert all(code in tc.TYPE_NAMES for code in tc.SUPPORTED)
    assert set(tc.INT_KEYS) <= set(tc.FIXED) and all(tc.FIXED[c].kind == "i" for c in tc.INT_KEYS)
    assert all(tc.JAVA_TYPES[t.java] == t.code for t in tc.TABLE if t.java)
    assert tc.name_of(tc.OBJECT) == "object" and tc.name_of(12345) == 12345


def test_every_list_of_column_types_comes_from_the_one_table():
    from ignite_tf.cli import build_parser
    from ignite_tf.pipeline.schema import schema
    from ignite_tf.validation.parse import FLOAT_TYPES, TYPES
    from ignite_tf.validation.suite import TYPE_LIST_NAMES

    assert list(COLUMN_TYPES) == list(tc.LOADABLE) == [t.name for t in tc.COLUMN_TABLE if t.loadable]
    assert all(COLUMN_TYPES[t.name] == t.sql for t in tc.COLUMN_TABLE if t.loadable)
    assert list(TYPES) == [t.name for t in tc.COLUMN_TABLE] and set(FLOAT_TYPES) == {"float32", "float64"}
    assert set(TYPE_LIST_NAMES) == set(TYPES) - {"string"}
    assert schema()["properties"]["source"]["properties"]["schema"]["additionalProperties"]["enum"] == list(tc.LOADABLE)
    load = build_parser()._subparsers._group_actions[0].choices["load"]
    assert ", ".join(tc.LOADABLE) in next(a.help for a in load._actions if a.dest == "schema")
    for t in tc.COLUMN_TABLE:  # the reader's dtype of each column type is the one its name says
        assert t.pandas[0] == ("str" if t.code == tc.STRING else tc.FIXED[t.code].name), t.name


def test_the_vocabulary_imports_no_numpy():
    """The CLI's parser and the DAG parser list column types: NumPy waits until a code is decoded."""
    code = "import sys, ignite_tf.typecodes, ignite_tf.cli; ignite_tf.cli.build_parser(); print('numpy' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr[-3000:]
