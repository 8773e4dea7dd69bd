"""A user script that fails at import, as a missing dependency does."""

import no_such_module_for_ignite_tf  # noqa: F401
