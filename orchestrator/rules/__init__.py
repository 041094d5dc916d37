"""The brief's rules as code: a static layer over file texts (`static`) and a dynamic layer that runs
the generated modules on a real game in a subprocess (`dynamic`)."""

from orchestrator.rules.static import (CONFIG_CLASS, FOLDER_FILES, GENERATED_FILES, PROTECTED_FILES, SOURCE_FILES,
                                       check_all, check_config, check_folder, check_syntax, config_fields)
from orchestrator.rules.violation import Violation, errors

__all__ = ["CONFIG_CLASS", "FOLDER_FILES", "GENERATED_FILES", "PROTECTED_FILES", "SOURCE_FILES", "Violation",
           "check_all", "check_config", "check_folder", "check_syntax", "config_fields", "errors"]
