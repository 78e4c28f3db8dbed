"""`make sanitize`: import padless._core from $PADLESS_CORE_SO (the ASan/UBSan build).

PYTHONPATH=tools/sanitize makes Python import this file at start-up, after the .pth files (the
scikit-build-core editable finder among them), so the finder put first here wins for
padless._core alone; subprocesses that inherit the environment load the same build.
Without $PADLESS_CORE_SO this does nothing.
"""

import os
import sys

_SO = os.environ.get("PADLESS_CORE_SO")


class _SanitizedCore:
    @staticmethod
    def find_spec(fullname, path=None, target=None):
        if fullname != "padless._core" or not _SO:
            return None
        import importlib.machinery
        import importlib.util

        loader = importlib.machinery.ExtensionFileLoader(fullname, _SO)
        return importlib.util.spec_from_file_location(fullname, _SO, loader=loader)


if _SO:
    sys.meta_path.insert(0, _SanitizedCore())
