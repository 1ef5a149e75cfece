# Sleeps far past any wall clock.
import time

time.sleep(600)
