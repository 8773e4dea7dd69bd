"""The data API's deprecated argument names, kept working until ``public_api.REMOVED_IN``."""

from __future__ import annotations

import functools

from ignite_tf.public_api import warn_deprecated

API = "ignite_tf.data"  # the namespace users call these functions by, and the deprecations name


def label_renamed(function):
    """``label=`` keeps working until ``public_api.REMOVED_IN`` as the deprecated name of ``label_column=``."""

    @functools.wraps(function)
    def call(*args, **kwargs):
        if "label" in kwargs:
            if "label_column" in kwargs:
                raise TypeError(f"{API}.{function.__name__}: give label_column= only (label= is its "
                                f"deprecated name)")
            warn_deprecated(f"{API}.{function.__name__}(label=)")
            kwargs["label_column"] = kwargs.pop("label")
        return function(*args, **kwargs)

    return call

