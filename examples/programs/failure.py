# A tool the policy refuses: the program sees a typed CallError and does not catch it.
host.delete_everything("/")
