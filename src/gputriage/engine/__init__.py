"""Judging one host: run the rules on its facts (`analysis`), fold consequences under their
cause (`causes`), apply the operator's acknowledgements (`acks`)."""
