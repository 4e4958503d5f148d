"""The store layer: where results go and how they are read back. results_log (a run's rows as
they arrive) in run_folder (the folder's files, marker and lock); tuning_db (the tuning database)
over tuning_schema (its tables and their migration); report, export and plots read rows.
Imports only core and families: the sinks are handed to the layers above."""
