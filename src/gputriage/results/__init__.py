"""What is done with a published result: its JSON document (`document`), read back
typed (`reader`), two compared (`diff`), one triaged for the on-call (`triage`)."""
