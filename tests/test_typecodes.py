"""The one table of Ignite binary type codes covers what the loader writes and the reader decodes."""

from __future__ import annotations

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
