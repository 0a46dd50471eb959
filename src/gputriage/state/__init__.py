"""State kept between runs on the node: the check history and the acknowledgements
(SQLite, under the state directory)."""
