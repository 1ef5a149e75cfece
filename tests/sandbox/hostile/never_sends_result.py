# Exits at once, without a Result.
import os

os._exit(0)
