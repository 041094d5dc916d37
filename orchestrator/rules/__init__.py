"""The brief's rules as code: a static layer over file texts (`static`, `integrity`, `inputs`, `machinery`,
`config_code`, `launch`; what an action helper is: `exposed`), the launch script run with recorders
(`recorded_launch`), and a dynamic layer (`dynamic`, run by the import check) whose child (`probe/`) runs the
generated modules on a real game in a fresh interpreter and compares what they do with what the researcher's own
env_move.py and template do."""

from orchestrator.rules.static import (CONFIG_CLASS, FOLDER_FILES, GENERATED_FILES, HELPER_README, PROTECTED_FILES,
                                       SOURCE_FILES, check_all, check_config, check_folder, check_syntax, config_fields)
from orchestrator.rules.violation import Violation, errors

__all__ = ["CONFIG_CLASS", "FOLDER_FILES", "GENERATED_FILES", "HELPER_README", "PROTECTED_FILES", "SOURCE_FILES",
           "Violation", "check_all", "check_config", "check_folder", "check_syntax", "config_fields", "errors"]
