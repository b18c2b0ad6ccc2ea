module clade

go 1.19
