#!/usr/bin/env python
"""Django's command-line utility: `python manage.py run_jobs`, `python manage.py remind 42`."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
