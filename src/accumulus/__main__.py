from accumulus.cli import script

script()
