"""The store layer: where results go and how they are read back. results_log (a run's rows as they
arrive) in run_folder (the folder's files, marker and lock), written whole (files); tuning_db (the
tuning database's queries) over tuning_schema (its tables, connections and the migration of old
databases); report, export and plots read rows. Imports only core and families: the layers above
hand their rows in."""
